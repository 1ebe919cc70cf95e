// tcpfloor: what loopback TCP itself costs on this machine, in C, for the
// round trips of shmem over tcp (get, fetching atomics) and for a 2-PE
// barrier. Two processes, pinned to CPUs 0 and 1, one TCP_NODELAY
// connection, 32-byte messages, busy-polling non-blocking receives (as
// UCX's and goshmem's progress do):
//
//	cc -O2 -o tcpfloor benchmarks/tcpfloor/tcpfloor.c
//	./tcpfloor pingpong [iters]   round trip: one side sends, the other answers
//	./tcpfloor exchange [iters]   both send, then both receive (a 2-PE barrier)
//
// No implementation that crosses tcp for each operation can go below these
// times; uct/tcp's BenchmarkSocketPingPong is the same floor from Go.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { msgLen = 32, warmup = 1000 };

static double now_us(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void pin(int cpu) {
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	sched_setaffinity(0, sizeof s, &s);
}

static void die(const char *what) {
	perror(what);
	exit(1);
}

// recv_msg busy-polls until one whole message has arrived.
static void recv_msg(int fd) {
	char b[msgLen];
	for (int got = 0; got < msgLen;) {
		ssize_t k = recv(fd, b + got, msgLen - got, MSG_DONTWAIT);
		if (k > 0)
			got += k;
		else if (k == 0 || errno != EAGAIN)
			die("recv");
	}
}

static void send_msg(int fd) {
	static const char m[msgLen];
	if (send(fd, m, msgLen, 0) != msgLen)
		die("send");
}

int main(int argc, char **argv) {
	if (argc < 2 || (strcmp(argv[1], "pingpong") && strcmp(argv[1], "exchange"))) {
		fprintf(stderr, "usage: tcpfloor pingpong|exchange [iters]\n");
		return 2;
	}
	int exchange = !strcmp(argv[1], "exchange");
	int iters = argc > 2 ? atoi(argv[2]) : 100000;
	int one = 1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof a;
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	if (ls < 0 || bind(ls, (void *)&a, sizeof a) || listen(ls, 1) || getsockname(ls, (void *)&a, &alen))
		die("listen");
	pid_t child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		pin(1);
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (void *)&a, sizeof a))
			die("connect");
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		for (int i = 0; i < warmup + iters; i++) {
			if (exchange) {
				send_msg(fd);
				recv_msg(fd);
			} else {
				recv_msg(fd);
				send_msg(fd);
			}
		}
		return 0;
	}
	pin(0);
	int fd = accept(ls, NULL, NULL);
	if (fd < 0)
		die("accept");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	double t = 0;
	for (int i = 0; i < warmup + iters; i++) {
		if (i == warmup)
			t = now_us();
		send_msg(fd);
		recv_msg(fd);
	}
	printf("%s %.2f us\n", argv[1], (now_us() - t) / iters);
	waitpid(child, NULL, 0);
	return 0;
}
