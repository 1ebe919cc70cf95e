// Command hello is a PE program for the launcher tests: it prints its
// argument, rank and job size from the launcher's environment.
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	fmt.Printf("hello %s from %s of %s\n", strings.Join(os.Args[1:], " "), os.Getenv("GOSHMEM_RANK"), os.Getenv("GOSHMEM_SIZE"))
}
