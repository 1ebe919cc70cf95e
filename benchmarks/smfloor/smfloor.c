// smfloor: what a message between two processes through shared memory
// costs in C on this machine at the least, the floor of an 8-byte tag or
// stream latency over sm: two processes, each pinned to a CPU of its own,
// pass a counter back and forth through one cache line of a shared
// mapping, each spinning on the line until the other's value appears and
// then storing the next. One way is half a round trip; no software runs
// on the path but a load, a compare and a store, so what a transport adds
// above this is its own cost (its instructions, and the further cache
// lines it moves).
//
//	cc -O2 -o smfloor benchmarks/smfloor/smfloor.c
//	./smfloor [iters [cpu0 cpu1]]   prints "line_lat MICROSECONDS" (one way), as ucx_perftest prints tag_lat
//
// The VMs this project measures on switch between a fast and a slow mode
// (ucx_perftest's sm tag_lat 0.17 or 0.55 us); this floor moves with
// them, so measured beside the comparison it says which mode a table
// was taken in, and how far each side is above the hardware.
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void pin(int cpu) {
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set) != 0) perror("smfloor: sched_setaffinity");
}

// pingpong passes the counter back and forth in round trips first to
// first+iters-1: side 0 stores the odd values, side 1 the even ones.
static void pingpong(volatile uint64_t *line, int side, long first, long iters) {
	uint64_t from = 2 * (uint64_t)first;
	for (uint64_t v = from + 1 + side; v <= from + 2 * (uint64_t)iters; v += 2) {
		while (__atomic_load_n(line, __ATOMIC_ACQUIRE) != v - 1) {
		}
		__atomic_store_n(line, v, __ATOMIC_RELEASE);
	}
}

int main(int argc, char **argv) {
	long iters = argc > 1 ? atol(argv[1]) : 1000000;
	int cpu0 = argc > 3 ? atoi(argv[2]) : 0, cpu1 = argc > 3 ? atoi(argv[3]) : 1;
	uint64_t *line = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (line == MAP_FAILED) {
		perror("smfloor: mmap");
		return 1;
	}
	long warm = iters / 10 + 1;
	pid_t pid = fork();
	if (pid < 0) {
		perror("smfloor: fork");
		return 1;
	}
	if (pid == 0) {
		pin(cpu1);
		pingpong(line, 1, 0, warm + iters);
		_exit(0);
	}
	pin(cpu0);
	pingpong(line, 0, 0, warm);
	double t = now_us();
	pingpong(line, 0, warm, iters);
	double dt = now_us() - t;
	waitpid(pid, NULL, 0);
	printf("line_lat %.4f\n", dt / iters / 2);
	return 0;
}
