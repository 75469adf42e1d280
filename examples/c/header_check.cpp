// The header from C++: compiles with -Wall -Wextra -Werror, links, and refuses bad handles.
#include <peregrine.h>

#include <cstdio>
#include <cstring>
#include <string>

int main() {
    int failures = 0;
    auto expect = [&](int32_t got, int32_t want, const char *call) {
        if (got != want) {
            std::printf("%s returned %s, expected %s\n", call, pg_status_name(got),
                        pg_status_name(want));
            failures++;
        }
    };
    expect(pg_context_free(nullptr), PG_ERROR_NULL_POINTER, "pg_context_free(NULL)");
    expect(pg_publisher_offer(reinterpret_cast<pg_publisher *>(0x1234), "x", 1, nullptr),
           PG_ERROR_BAD_HANDLE, "pg_publisher_offer(bogus)");
    if (std::strlen(pg_last_error()) == 0) {
        std::printf("pg_last_error() is empty after a failure\n");
        failures++;
    }
    pg_context *ctx = nullptr;
    expect(pg_context_new(&ctx), PG_OK, "pg_context_new");
    pg_subscriber *sub = nullptr;
    expect(pg_subscriber_new(ctx, "t", "ipc://x", 42, &sub), PG_ERROR_INVALID_ARGUMENT,
           "pg_subscriber_new(idle 42)");
    expect(pg_context_free(ctx), PG_OK, "pg_context_free");
    expect(pg_context_free(ctx), PG_ERROR_BAD_HANDLE, "pg_context_free twice");
    std::printf("peregrine %s from C++: %s\n", pg_version(), failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
