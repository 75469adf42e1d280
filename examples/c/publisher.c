/*
 * publisher: publishes COUNT messages on TOPIC, then closes.
 *
 *   publisher URI TOPIC COUNT [SIZE]
 *
 * URI is a transport (ipc://NAME, udp://HOST:PORT, tcp://HOST:PORT, mcast://GROUP:PORT), or
 * "-" to publish by topic name through topic resolution. Message i carries i in its first 8
 * bytes (little-endian) and the byte (i + k) & 0xff at offset k after them, so the subscriber
 * example can check every byte. Even messages are sent with pg_publisher_offer, odd ones are
 * written in place with pg_publisher_claim and pg_publisher_commit.
 */
#define _POSIX_C_SOURCE 200809L
#include <peregrine.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fail(const char *what, int32_t status) {
    fprintf(stderr, "publisher: %s: %s (%s)\n", what, pg_last_error(), pg_status_name(status));
    return 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fill(uint8_t *buf, size_t size, uint64_t i) {
    for (int b = 0; b < 8; b++) buf[b] = (uint8_t)(i >> (8 * b));
    for (size_t k = 8; k < size; k++) buf[k] = (uint8_t)(i + k);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s URI TOPIC COUNT [SIZE]\n", argv[0]);
        return 2;
    }
    const char *uri = argv[1], *topic = argv[2];
    uint64_t count = strtoull(argv[3], NULL, 10);
    size_t size = argc > 4 ? strtoul(argv[4], NULL, 10) : 64;
    if (size < 8) {
        fprintf(stderr, "publisher: SIZE must be 8 or more (the sequence fills 8 bytes)\n");
        return 2;
    }

    pg_context *ctx = NULL;
    pg_publisher *pub = NULL;
    int32_t rc = pg_context_from_env(&ctx);
    if (rc != PG_OK) return fail("context", rc);
    rc = strcmp(uri, "-") == 0 ? pg_publish(ctx, topic, &pub)
                               : pg_publisher_new(ctx, topic, uri, &pub);
    if (rc != PG_OK) return fail("publisher", rc);
    const char *bound = NULL;
    pg_publisher_uri(pub, &bound);
    fprintf(stderr, "publisher: %s on %s\n", topic, bound);

    /* Wait up to 20 s for a subscriber (a message sent before it attaches is not for it). */
    double deadline = now_s() + 20.0;
    while (pg_publisher_subscriber_count(pub) < 1) {
        if (now_s() > deadline) {
            fprintf(stderr, "publisher: no subscriber came within 20 s\n");
            return 1;
        }
        pg_publisher_do_work(pub);
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }

    uint8_t *buf = malloc(size);
    for (uint64_t i = 0; i < count; i++) {
        for (;;) {
            uint64_t seq = 0;
            if (i % 2 == 0) {
                fill(buf, size, i);
                rc = pg_publisher_offer(pub, buf, size, &seq);
            } else {
                uint8_t *room = NULL;
                rc = pg_publisher_claim(pub, size, &room);
                if (rc == PG_OK) {
                    fill(room, size, i); /* straight into the log on ipc:// */
                    rc = pg_publisher_commit(pub, &seq);
                    if (rc != PG_OK) pg_publisher_abort(pub);
                }
            }
            if (rc == PG_OK) break;
            if (rc != PG_ERROR_BACK_PRESSURED) return fail("offer", rc);
            pg_publisher_do_work(pub); /* the subscriber makes room: wait for it */
        }
    }
    pg_publisher_flush(pub);

    pg_publisher_counters c;
    pg_publisher_close(pub);
    pg_publisher_get_counters(pub, &c);
    printf("published %llu messages, %llu bytes, back-pressured %llu times\n",
           (unsigned long long)c.messages, (unsigned long long)c.bytes,
           (unsigned long long)c.back_pressured);
    free(buf);
    pg_publisher_free(pub);
    pg_context_free(ctx);
    return c.messages == count ? 0 : 1;
}
