// Cache-line ping-pong shapes between two pinned threads, with no Peregrine code: the
// experiment behind "What the modes are" and "What is Peregrine's" in docs/benchmarks.md.
//
//   cc -O2 -pthread -o /tmp/cacheline-shapes scripts/cacheline-shapes.c
//   /tmp/cacheline-shapes [ROUNDS] [CPU_A] [CPU_B]      # default 8 rounds on CPUs 0 and 1
//
// Each round runs every shape for 20,000 round trips, one after the other, and prints the
// median half round trip in nanoseconds (rdtsc, calibrated against CLOCK_MONOTONIC_RAW), so
// shapes are compared within one machine mode:
//   one        one line, written by each side in turn (`bench floor`, the one-line floor);
//   two        each side writes a line of its own and spins on the other's (the two-line floor);
//   log        each message on the next line of a 16 MiB ring per direction, the reader
//              spinning on the line the writer writes next (the shape of Peregrine's log):
//              four stores per line, the commit word last;
//   log-1st    the same with one store per line;
//   log-clean  the same, the writer re-marking the line 64 lines ahead after each message
//              (Peregrine's clean-ahead);
//   log-demote the same, the writer demoting the line it wrote (CLDEMOTE, a no-op hint where
//              the CPU lacks it).
// Run nothing else meanwhile: both threads spin.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>

#define RING_LINES (1u << 18) /* 16 MiB of 64-byte lines */
#define TRIPS 20000
#define COMMIT 3 /* the word of a line a reader waits on */

enum { ONE, TWO, LOG, LOG_1ST, LOG_CLEAN, LOG_DEMOTE, SHAPES };
static const char *names[SHAPES] = {"one", "two", "log", "log-1st", "log-clean", "log-demote"};

static volatile uint64_t *page, *ring_ping, *ring_pong;
static volatile int shape = -1, go;
static int cpu_b = 1;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (pthread_setaffinity_np(pthread_self(), sizeof s, &s) != 0) {
        fprintf(stderr, "cannot pin to CPU %d\n", cpu);
        exit(1);
    }
}

// CLDEMOTE (0F 1C /0), encoded by hand for assemblers that do not know it.
static inline void demote(volatile void *p) {
    __asm__ volatile(".byte 0x0f, 0x1c, 0x00" ::"a"(p) : "memory");
}

// Writes message `value` on line `i` of `ring` in the shape's way.
static inline void write_line(int s, volatile uint64_t *ring, uint64_t i, uint64_t value) {
    volatile uint64_t *l = &ring[(i % RING_LINES) * 8];
    if (s != LOG_1ST) {
        l[0] = value;
        l[1] = value;
        l[4] = value;
    }
    l[COMMIT] = value;
    if (s == LOG_CLEAN)
        ring[((i + 64) % RING_LINES) * 8 + COMMIT] = 0;
    if (s == LOG_DEMOTE)
        demote(l);
}

static inline void wait_line(volatile uint64_t *ring, uint64_t i, uint64_t value) {
    while (ring[(i % RING_LINES) * 8 + COMMIT] != value)
        _mm_pause();
}

static void *pong(void *arg) {
    (void)arg;
    pin(cpu_b);
    for (;;) {
        while (!go)
            _mm_pause();
        int s = shape;
        if (s < 0)
            return NULL;
        for (uint64_t i = 0; i < TRIPS; i++) {
            uint64_t ping = 2 * i + 1;
            if (s == ONE) {
                while (page[0] != ping)
                    _mm_pause();
                page[0] = ping + 1;
            } else if (s == TWO) {
                while (page[0] != ping)
                    _mm_pause();
                page[32] = ping + 1;
            } else {
                wait_line(ring_ping, i, ping);
                write_line(s, ring_pong, i, ping + 1);
            }
        }
        go = 0;
    }
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double ns_per_tick(void) {
    struct timespec a, b, pause = {0, 100000000};
    clock_gettime(CLOCK_MONOTONIC_RAW, &a);
    uint64_t t = __rdtsc();
    nanosleep(&pause, NULL);
    clock_gettime(CLOCK_MONOTONIC_RAW, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    return ns / (double)(__rdtsc() - t);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 8;
    int cpu_a = argc > 2 ? atoi(argv[2]) : 0;
    cpu_b = argc > 3 ? atoi(argv[3]) : 1;
    int flags = MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE;
    page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, flags, -1, 0);
    ring_ping = mmap(NULL, RING_LINES * 64, PROT_READ | PROT_WRITE, flags, -1, 0);
    ring_pong = mmap(NULL, RING_LINES * 64, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (page == MAP_FAILED || ring_ping == MAP_FAILED || ring_pong == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, pong, NULL);
    pin(cpu_a);
    double tick_ns = ns_per_tick();
    static double half[TRIPS];
    for (int r = 0; r < rounds; r++) {
        printf("round %d:", r);
        for (int s = 0; s < SHAPES; s++) {
            for (uint64_t k = 0; k < RING_LINES; k++)
                ring_ping[k * 8 + COMMIT] = ring_pong[k * 8 + COMMIT] = 0;
            page[0] = page[32] = 0;
            shape = s;
            __sync_synchronize();
            go = 1;
            for (uint64_t i = 0; i < TRIPS; i++) {
                uint64_t ping = 2 * i + 1;
                uint64_t t0 = __rdtsc();
                if (s == ONE) {
                    page[0] = ping;
                    while (page[0] != ping + 1)
                        _mm_pause();
                } else if (s == TWO) {
                    page[0] = ping;
                    while (page[32] != ping + 1)
                        _mm_pause();
                } else {
                    write_line(s, ring_ping, i, ping);
                    wait_line(ring_pong, i, ping + 1);
                }
                half[i] = (double)(__rdtsc() - t0) * tick_ns / 2;
            }
            while (go)
                _mm_pause();
            qsort(half, TRIPS, sizeof half[0], by_value);
            printf(" %s=%.0f", names[s], half[TRIPS / 2]);
        }
        printf("\n");
        fflush(stdout);
    }
    shape = -1;
    go = 1;
    pthread_join(t, NULL);
    return 0;
}
