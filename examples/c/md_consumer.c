/*
 * md_consumer: a market data consumer in C. Logs in to a distributor, opens ITEMs (names or
 * globs) of SERVICE, and prints one line per event as `peregrine client --print` does
 * (REFRESH AAA.O BID=189.21 ASK=189.22 ..., prices to their last digit), until COUNT REFRESH
 * and UPDATE events have arrived; then exits 0.
 *
 *   md_consumer HOST:PORT USER TOKEN SERVICE COUNT ITEM...
 *
 * A refused login or 20 s without an event is a failure (exit 1).
 */
#define _POSIX_C_SOURCE 200809L
#include <peregrine.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t items; /* REFRESH and UPDATE events so far */
} state;

/* A price: mantissa x 10^exponent, in plain decimals with every digit it has. */
static void print_price(int64_t mantissa, int32_t exponent) {
    uint64_t digits = mantissa < 0 ? (uint64_t)0 - (uint64_t)mantissa : (uint64_t)mantissa;
    if (mantissa < 0) putchar('-');
    if (exponent >= 0) {
        printf("%" PRIu64, digits);
        for (int32_t i = 0; i < exponent; i++) putchar('0');
        return;
    }
    uint64_t div = 1;
    for (int32_t i = 0; i < -exponent; i++) div *= 10;
    printf("%" PRIu64 ".%0*" PRIu64, digits / div, (int)-exponent, digits % div);
}

static void print_fields(const pg_md_event *e) {
    for (size_t i = 0; i < e->field_count; i++) {
        const pg_md_field *f = &e->fields[i];
        if (f->name)
            printf(" %s=", f->name);
        else
            printf(" #%u=", (unsigned)f->fid);
        switch (f->type) {
        case PG_MD_INT: printf("%" PRId64, f->int_value); break;
        case PG_MD_PRICE: print_price(f->int_value, f->exponent); break;
        case PG_MD_TIME: printf("%" PRIu64 "ns", f->time_ns); break;
        case PG_MD_ENUM: printf("%u", (unsigned)f->enum_value); break;
        case PG_MD_STRING: printf("\"%.*s\"", (int)f->string_length, f->string); break;
        default: printf("?"); break;
        }
    }
}

static const char *state_name(int32_t s) {
    switch (s) {
    case PG_MD_OK: return "ok";
    case PG_MD_STALE: return "stale";
    case PG_MD_CLOSED: return "closed";
    case PG_MD_NOT_ENTITLED: return "not-entitled";
    case PG_MD_NOT_FOUND: return "not-found";
    case PG_MD_REJECTED: return "rejected";
    default: return "?";
    }
}

static void on_event(void *user, const pg_md_event *e) {
    state *s = user;
    switch (e->kind) {
    case PG_MD_REFRESH:
    case PG_MD_UPDATE:
        printf("%s %.*s", e->kind == PG_MD_REFRESH ? "REFRESH" : "UPDATE", (int)e->item_length,
               e->item);
        print_fields(e);
        putchar('\n');
        s->items++;
        break;
    case PG_MD_STATUS:
        printf("STATUS %.*s %s \"%.*s\"\n", (int)e->item_length, e->item, state_name(e->state),
               (int)e->text_length, e->text);
        break;
    case PG_MD_GAP:
        printf("GAP %.*s expected %u got %u\n", (int)e->item_length, e->item, e->expected,
               e->item_seq);
        break;
    case PG_MD_CONFLATED:
        printf("CONFLATED items=%u dropped=%u\n", e->items, e->dropped);
        break;
    case PG_MD_DISCONNECTED:
        printf("DISCONNECTED %.*s\n", (int)e->text_length, e->text);
        break;
    default: break;
    }
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr,
                "usage: %s HOST:PORT USER TOKEN SERVICE COUNT ITEM...\n"
                "  over TLS: PEREGRINE_TLS_CA=ca.crt (and PEREGRINE_TLS_CERT, PEREGRINE_TLS_KEY\n"
                "  for a user identified by its certificate)\n",
                argv[0]);
        return 2;
    }
    const char *address = argv[1];
    uint64_t count = strtoull(argv[5], NULL, 10);
    pg_md_consumer *c = NULL;
    const char *ca = getenv("PEREGRINE_TLS_CA");
    int32_t rc = ca ? pg_md_consumer_new_tls(&address, 1, argv[2], argv[3], ca,
                                             getenv("PEREGRINE_TLS_CERT"),
                                             getenv("PEREGRINE_TLS_KEY"), NULL, &c)
                    : pg_md_consumer_new(&address, 1, argv[2], argv[3], &c);
    if (rc != PG_OK) {
        fprintf(stderr, "md_consumer: %s (%s)\n", pg_last_error(), pg_status_name(rc));
        return 1;
    }
    uint32_t request = 0;
    rc = pg_md_consumer_open(c, argv[4], (const char *const *)&argv[6], (size_t)(argc - 6),
                             &request);
    if (rc != PG_OK) {
        fprintf(stderr, "md_consumer: open: %s\n", pg_last_error());
        return 1;
    }
    state s = {0};
    int idle_s = 0;
    while (s.items < count) {
        int32_t n = pg_md_consumer_poll(c, 1000, on_event, &s);
        if (n < 0) {
            fprintf(stderr, "md_consumer: poll: %s\n", pg_last_error());
            return 1;
        }
        fflush(stdout);
        idle_s = n == 0 ? idle_s + 1 : 0;
        if (idle_s >= 20) {
            fprintf(stderr, "md_consumer: 20 s without an event\n");
            return 1;
        }
    }
    pg_md_consumer_free(c);
    return 0;
}
