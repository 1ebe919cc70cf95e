// memfloor: what a copy of 1 MiB between two processes' shared memory
// costs in C on this machine, the floor of a 1 MiB put or get over shared
// memory. One process, two mappings of one /dev/shm-like memfd (as a put
// writes into a peer's mapped segment), glibc's memcpy:
//
//	cc -O2 -o memfloor benchmarks/memfloor/memfloor.c
//	./memfloor [iters]   prints "memcpy1m MICROSECONDS" and "memcpy1m_fresh MICROSECONDS", as oshm_ref.c prints its rows
//
// memcpy1m is the copy into warm pages. memcpy1m_fresh is what
// oshm_ref.c's put1m loop meets: 1010 copies (its count) into a mapping
// made just before, of pages another mapping touched (a peer's heap, which
// the peer wrote and this process maps at start): the first copy faults in
// every page of it, one at a time for writes, which on these VMs costs
// several microseconds per copy over the loop.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <unistd.h>

enum { big = 1 << 20 };

static double now_us(void) {
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return tv.tv_sec * 1e6 + tv.tv_usec;
}

int main(int argc, char **argv) {
	int iters = argc > 1 ? atoi(argv[1]) : 1000;
	int fd = memfd_create("memfloor", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, 2 * big) != 0) {
		perror("memfloor: memfd");
		return 1;
	}
	char *seg = mmap(NULL, 2 * big, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	char *peer = mmap(NULL, 2 * big, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (seg == MAP_FAILED || peer == MAP_FAILED) {
		perror("memfloor: mmap");
		return 1;
	}
	memset(seg, 1, 2 * big);
	for (int i = 0; i < 10; i++) memcpy(peer + big, seg, big);
	double t = now_us();
	for (int i = 0; i < iters; i++) {
		memcpy(peer + big, seg, big);
		__asm__ __volatile__("" ::: "memory"); /* keep every copy */
	}
	printf("memcpy1m %.4f\n", (now_us() - t) / iters);
	char *fresh = mmap(NULL, 2 * big, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (fresh == MAP_FAILED) {
		perror("memfloor: mmap");
		return 1;
	}
	enum { putIters = 1010 };
	t = now_us();
	for (int i = 0; i < putIters; i++) {
		memcpy(fresh + big, seg, big);
		__asm__ __volatile__("" ::: "memory");
	}
	printf("memcpy1m_fresh %.4f\n", (now_us() - t) / putIters);
	return 0;
}
