package shmem_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// errorDropped matches code that discards the error of Init or of an
// allocation: the blank identifier given the error of shmem.Malloc & co.,
// or a call of shmem.Init or shmem.InitThread alone on its line.
var errorDropped = regexp.MustCompile(`(?m)(^|[\s,(])_\s*:?=\s*shmem\.(Init|InitThread|Malloc|Calloc|Align|MallocWithHints|Realloc)\b|^\s*(//\s*)?shmem\.(Init|InitThread)\([^)]*\)\s*$`)

// TestExamplesCheckErrors: the code that users copy (the README, the
// examples of go doc, the doc comments and the programs of examples/)
// checks the errors of Init and of the allocations.
func TestExamplesCheckErrors(t *testing.T) {
	root := ".."
	check := func(path, text string) {
		for i, line := range strings.Split(text, "\n") {
			if errorDropped.MatchString(line) {
				t.Errorf("%s:%d drops an error: %s", path, i+1, strings.TrimSpace(line))
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	check("README.md", string(readme))
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		text := string(b)
		if filepath.Base(path) != "example_test.go" && !strings.HasPrefix(rel, "examples"+string(filepath.Separator)) {
			// Elsewhere only the doc comments: tests may drop errors.
			var doc []string
			for _, line := range strings.Split(text, "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "//") {
					doc = append(doc, line)
				} else {
					doc = append(doc, "")
				}
			}
			text = strings.Join(doc, "\n")
		}
		check(rel, text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
