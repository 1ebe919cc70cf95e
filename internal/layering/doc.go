// Package layering holds the tests of goshmem's import rules: ucp reaches
// its transports only through uct's registry, and the launcher links no
// transport outside goshmem-info. It has no code of its own.
package layering
