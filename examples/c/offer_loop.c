/*
 * offer_loop: offers and polls N messages of 32 bytes through one ipc:// log in one thread,
 * the workload of crates/api/examples/offer_loop.rs through the C API. Their instruction
 * counts under `valgrind --tool=callgrind` give the C API's own cost per message, free of
 * the machine's timing noise.
 *
 *   offer_loop [N]
 */
#include <peregrine.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void on_message(void *user, const pg_message *m) { *(uint64_t *)user += m->sequence; }

int main(int argc, char **argv) {
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    uint64_t sent = 0, received = 0, sum = 0;
    char uri[64];
    snprintf(uri, sizeof uri, "ipc://offer-loop-c-%d", (int)getpid());
    pg_context *ctx;
    pg_publisher *pub;
    pg_subscriber *sub;
    if (pg_context_new(&ctx) != PG_OK || pg_publisher_new(ctx, "offer.loop", uri, &pub) != PG_OK ||
        pg_subscriber_new(ctx, "offer.loop", uri, PG_IDLE_SPIN, &sub) != PG_OK) {
        fprintf(stderr, "offer_loop: %s\n", pg_last_error());
        return 1;
    }
    uint8_t payload[32] = {7};
    while (received < n) {
        /* Up to 64 messages ahead, then drain: both paths run n times. */
        while (sent < n && sent - received < 64)
            if (pg_publisher_offer(pub, payload, sizeof payload, NULL) == PG_OK) sent++;
        int32_t got = pg_subscriber_poll(sub, on_message, &sum, 64);
        if (got < 0) {
            fprintf(stderr, "offer_loop: %s\n", pg_last_error());
            return 1;
        }
        received += (uint64_t)got;
    }
    printf("%llu messages, sequence sum %llu\n", (unsigned long long)received,
           (unsigned long long)sum);
    pg_subscriber_free(sub);
    pg_publisher_free(pub);
    pg_context_free(ctx);
    return 0;
}
