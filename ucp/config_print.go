package ucp

import (
	"fmt"
	"io"
	"strings"
)

// ConfigPrintFlags select what Config.Print writes (ucs_config_print_flags_t).
type ConfigPrintFlags uint32

// Print flags, with the bit numbers of the UCX documents.
const (
	// ConfigPrintConfig writes the variables, one NAME=value line each.
	ConfigPrintConfig ConfigPrintFlags = 1 << 0
	// ConfigPrintHeader writes the title in a comment block first.
	ConfigPrintHeader ConfigPrintFlags = 1 << 1
	// ConfigPrintDoc writes each variable's description and default in a
	// comment block before it.
	ConfigPrintDoc ConfigPrintFlags = 1 << 2
	// ConfigPrintHidden also writes hidden variables; goshmem has none, so
	// it changes nothing.
	ConfigPrintHidden ConfigPrintFlags = 1 << 3
	// ConfigPrintCommentDefault comments out ("#NAME=value") the variables
	// that hold their default value.
	ConfigPrintCommentDefault ConfigPrintFlags = 1 << 4
)

// Print writes the configuration to w as ucp_config_print does: with
// ConfigPrintHeader a comment block with title ("UCX configuration" when
// empty), then with ConfigPrintConfig every variable, sorted by name, as
// PREFIXNAME=value, preceded with ConfigPrintDoc by its description and
// default, and commented out with ConfigPrintCommentDefault when it holds
// its default. It returns the first write error.
func (c *Config) Print(w io.Writer, title string, flags ConfigPrintFlags) error {
	var b strings.Builder
	if flags&ConfigPrintHeader != 0 {
		if title == "" {
			title = "UCX configuration"
		}
		fmt.Fprintf(&b, "#\n# %s\n#\n", title)
	}
	if flags&ConfigPrintConfig != 0 {
		for _, f := range c.Fields() {
			v := c.Get(f.Name)
			if flags&ConfigPrintDoc != 0 {
				fmt.Fprintf(&b, "#\n# %s\n#\n# default: %s\n#\n", f.Doc, f.Default)
			}
			if flags&ConfigPrintCommentDefault != 0 && v == f.Default {
				b.WriteByte('#')
			}
			fmt.Fprintf(&b, "%s%s=%s\n", c.Prefix(), f.Name, v)
			if flags&ConfigPrintDoc != 0 {
				b.WriteByte('\n')
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
