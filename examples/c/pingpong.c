/*
 * pingpong: the half round trip of a message over shared memory, between two processes,
 * measured as `peregrine bench pingpong` measures it (both sides busy-spinning, each pinned
 * to its own CPU, the time-stamp counter read around each round trip).
 *
 *   pingpong pong NAME [CPU]                   start first: echoes every ping
 *   pingpong ping NAME [COUNT [SIZE [CPU]]]    prints {"median_ns":..,"p99_ns":..,...}
 *
 * The ping stream is ipc://NAME-ping, the pong stream ipc://NAME-pong. Each ping carries its
 * number in its first 8 bytes and the echo is checked. The pong side echoes with
 * pg_publisher_offer, as the Rust benchmark's does (publisher.c shows claim and commit).
 * Defaults: COUNT 1000000 (after COUNT / 10 warm-up round trips), SIZE 32, ping on CPU 0 and
 * pong on CPU 1.
 */
#define _GNU_SOURCE
#include <peregrine.h>

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

static int fail(const char *what, int32_t status) {
    fprintf(stderr, "pingpong: %s: %s (%s)\n", what, pg_last_error(), pg_status_name(status));
    return 1;
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Ticks of the round-trip clock, and nanoseconds per tick. */
#if defined(__x86_64__)
static uint64_t ticks(void) { return __rdtsc(); }
static double ns_per_tick(void) {
    uint64_t n0 = mono_ns(), t0 = ticks();
    while (mono_ns() - n0 < 50000000u) {
    }
    return (double)(mono_ns() - n0) / (double)(ticks() - t0);
}
#else
static uint64_t ticks(void) { return mono_ns(); }
static double ns_per_tick(void) { return 1.0; }
#endif

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        fprintf(stderr, "pingpong: cannot pin to CPU %d (running unpinned)\n", cpu);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    pg_publisher *echo;
    int32_t status;
} pong_state;

/* The pong side's handler: echo the ping. */
static void echo(void *user, const pg_message *m) {
    pong_state *s = user;
    int32_t rc;
    while ((rc = pg_publisher_offer(s->echo, m->payload, m->length, NULL)) ==
           PG_ERROR_BACK_PRESSURED) {
    }
    if (rc != PG_OK) s->status = rc;
}

typedef struct {
    uint64_t number;
    size_t length;
    int got;
} ping_state;

static void on_echo(void *user, const pg_message *m) {
    ping_state *s = user;
    s->number = 0;
    if (m->length >= 8) memcpy(&s->number, m->payload, 8);
    s->length = m->length;
    s->got = 1;
}

static int open_pair(const char *name, int ping_side, pg_context **ctx, pg_publisher **pub,
                     pg_subscriber **sub) {
    char ping_uri[256], pong_uri[256];
    snprintf(ping_uri, sizeof ping_uri, "ipc://%s-ping", name);
    snprintf(pong_uri, sizeof pong_uri, "ipc://%s-pong", name);
    int32_t rc = pg_context_new(ctx);
    if (rc != PG_OK) return fail("context", rc);
    rc = pg_publisher_new(*ctx, ping_side ? "pingpong.ping" : "pingpong.pong",
                          ping_side ? ping_uri : pong_uri, pub);
    if (rc != PG_OK) return fail("publisher", rc);
    rc = pg_subscriber_new(*ctx, ping_side ? "pingpong.pong" : "pingpong.ping",
                           ping_side ? pong_uri : ping_uri, PG_IDLE_SPIN, sub);
    if (rc != PG_OK) return fail("subscriber", rc);
    return 0;
}

static int pong(const char *name, int cpu) {
    pg_context *ctx;
    pg_publisher *pub;
    pg_subscriber *sub;
    if (open_pair(name, 0, &ctx, &pub, &sub)) return 1;
    pin(cpu);
    pong_state s = {pub, PG_OK};
    uint64_t started = mono_ns(), empty = 0;
    int connected = 0;
    for (;;) {
        int32_t n = pg_subscriber_poll(sub, echo, &s, 16);
        if (n < 0) return fail("poll", n);
        if (s.status != PG_OK) return fail("echo", s.status);
        if (n > 0) continue;
        /* Now and then while idle: events (the ping side closing ends the run). */
        if (++empty % 4096 == 0) {
            pg_event ev;
            while (pg_subscriber_next_event(sub, &ev) == 1) {
                if (ev.kind == PG_EVENT_CONNECTED) connected = 1;
                if (ev.kind == PG_EVENT_PUBLISHER_CLOSED || ev.kind == PG_EVENT_PUBLISHER_DIED) {
                    pg_subscriber_free(sub);
                    pg_publisher_free(pub);
                    pg_context_free(ctx);
                    return 0;
                }
            }
            if (!connected && mono_ns() - started > 30000000000u) {
                fprintf(stderr, "pingpong: no ping side came within 30 s\n");
                return 1;
            }
        }
    }
}

static int ping(const char *name, uint64_t count, size_t size, int cpu) {
    uint64_t warmup = count / 10;
    pg_context *ctx;
    pg_publisher *pub;
    pg_subscriber *sub;
    if (size < 8) {
        fprintf(stderr, "pingpong: SIZE must be 8 or more\n");
        return 2;
    }
    if (open_pair(name, 1, &ctx, &pub, &sub)) return 1;
    uint64_t deadline = mono_ns() + 30000000000u;
    while (pg_publisher_subscriber_count(pub) < 1 || pg_subscriber_is_connected(sub) != 1) {
        if (mono_ns() > deadline) {
            fprintf(stderr, "pingpong: the pong side did not attach within 30 s\n");
            return 1;
        }
        ping_state none = {0, 0, 0};
        pg_subscriber_poll(sub, on_echo, &none, 16);
    }
    double scale = ns_per_tick();
    pin(cpu);
    uint8_t *buf = calloc(1, size);
    uint64_t *samples = malloc(sizeof(uint64_t) * (count ? count : 1));
    for (uint64_t i = 0; i < warmup + count; i++) {
        memcpy(buf, &i, 8);
        ping_state s = {0, 0, 0};
        uint64_t t0 = ticks();
        int32_t rc;
        while ((rc = pg_publisher_offer(pub, buf, size, NULL)) == PG_ERROR_BACK_PRESSURED) {
        }
        if (rc != PG_OK) return fail("offer", rc);
        while (!s.got) {
            int32_t n = pg_subscriber_poll(sub, on_echo, &s, 1);
            if (n < 0) return fail("poll", n);
        }
        uint64_t t1 = ticks();
        if (s.number != i || s.length != size) {
            fprintf(stderr, "pingpong: ping %llu came back as %llu (%zu bytes)\n",
                    (unsigned long long)i, (unsigned long long)s.number, s.length);
            return 1;
        }
        if (i >= warmup) samples[i - warmup] = t1 - t0;
    }
    qsort(samples, count, sizeof *samples, cmp_u64);
    double half = scale / 2.0;
    printf("{\"count\":%llu,\"size\":%zu,\"min_ns\":%.1f,\"median_ns\":%.1f,"
           "\"p99_ns\":%.1f,\"p999_ns\":%.1f,\"max_ns\":%.1f}\n",
           (unsigned long long)count, size, samples[0] * half, samples[count / 2] * half,
           samples[count * 99 / 100] * half, samples[count * 999 / 1000] * half,
           samples[count - 1] * half);
    pg_publisher_close(pub); /* the pong side sees it and exits */
    pg_publisher_free(pub);
    pg_subscriber_free(sub);
    pg_context_free(ctx);
    free(buf);
    free(samples);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "pong") == 0)
        return pong(argv[2], argc > 3 ? atoi(argv[3]) : 1);
    if (argc >= 3 && strcmp(argv[1], "ping") == 0) {
        uint64_t count = argc > 3 ? strtoull(argv[3], NULL, 10) : 1000000;
        if (count == 0) {
            fprintf(stderr, "pingpong: COUNT must be 1 or more\n");
            return 2;
        }
        return ping(argv[2], count, argc > 4 ? strtoul(argv[4], NULL, 10) : 32,
                    argc > 5 ? atoi(argv[5]) : 0);
    }
    fprintf(stderr, "usage: %s pong NAME [CPU] | %s ping NAME [COUNT [SIZE [CPU]]]\n", argv[0],
            argv[0]);
    return 2;
}
