package symheap_test

// ucp links no transport; the tests' contexts select among all of them.
import _ "github.com/goshmem/goshmem/uct/transports"
