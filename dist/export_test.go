package dist

// Objects returns the number of objects of this PE, for the tests.
func Objects() int {
	mu.Lock()
	defer mu.Unlock()
	return len(objects)
}
