/* The plan cache's size cap through the library: nn_options.cache_max
 * against $NN_CACHE_MAX, the sizes NN_CACHE_MAX accepts, and the argument
 * check.  (tests/test_cache.sh covers eviction order, hits and nncache.) */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "check.h"
#include "nn.h"

static const char *MODEL = "/usr/share/libonnx-testdata/data/node/test_relu/model.onnx";

/* Load MODEL into `dir` with cache_max `cap`; the stats' cache warning (or "") into `warning`. */
static nn_status load(const char *dir, int64_t cap, bool *wrote, char *warning, size_t size) {
    nn_options opt = nn_options_default();
    opt.cache_dir = dir;
    opt.cache_max = cap;
    opt.threads = 1;
    nn_model *m;
    nn_status st = nn_load(MODEL, &opt, &m);
    warning[0] = 0;
    *wrote = false;
    if (st != NN_OK) return st;
    nn_model_stats s;
    nn_model_get_stats(m, &s);
    *wrote = s.cache == NN_CACHE_MISS && s.cache_path != NULL;
    snprintf(warning, size, "%s", s.cache_warning ? s.cache_warning : "");
    nn_free(m);
    return st;
}

int main(void) {
    char dir[] = "/tmp/nn-cache-cap.XXXXXX", warning[400];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    bool wrote;

    check_set_case("sizes");
    int64_t b = 0;
    CHECK(nn_cache_parse_size("123", &b) && b == 123, "123 -> %lld", (long long)b);
    CHECK(nn_cache_parse_size("512M", &b) && b == 512LL << 20, "512M -> %lld", (long long)b);
    CHECK(nn_cache_parse_size("2g", &b) && b == 2LL << 30, "2g -> %lld", (long long)b);
    CHECK(nn_cache_parse_size("1.5GiB", &b) && b == 3LL << 29, "1.5GiB -> %lld", (long long)b);
    CHECK(nn_cache_parse_size("none", &b) && b == -1, "none -> %lld", (long long)b);
    const char *bad[] = {"", "lots", "-1", "5X", "1MM", "nan", "1e30"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(!nn_cache_parse_size(bad[i], &b), "'%s' should not be a size", bad[i]);

    check_set_case("the option wins over NN_CACHE_MAX");
    setenv("NN_CACHE_MAX", "none", 1);
    CHECK(load(dir, 100, &wrote, warning, sizeof warning) == NN_OK, "load: %s", nn_last_error());
    CHECK(!wrote && strstr(warning, "exceed the plan cache's cap"), "cache_max 100: wrote %d, warning '%s'", wrote,
          warning);
    setenv("NN_CACHE_MAX", "100", 1);
    CHECK(load(dir, -1, &wrote, warning, sizeof warning) == NN_OK, "load: %s", nn_last_error());
    CHECK(wrote && !warning[0], "cache_max -1 (no cap): wrote %d, warning '%s'", wrote, warning);

    check_set_case("NN_CACHE_MAX when the option is 0");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -f %s/*.nnplan", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    CHECK(load(dir, 0, &wrote, warning, sizeof warning) == NN_OK, "load: %s", nn_last_error());
    CHECK(!wrote && strstr(warning, "exceed the plan cache's cap"), "NN_CACHE_MAX=100: wrote %d, warning '%s'", wrote,
          warning);
    setenv("NN_CACHE_MAX", "lots", 1);
    CHECK(load(dir, 0, &wrote, warning, sizeof warning) == NN_OK, "load: %s", nn_last_error());
    CHECK(wrote && strstr(warning, "NN_CACHE_MAX='lots' is not a size"), "NN_CACHE_MAX=lots: wrote %d, warning '%s'",
          wrote, warning);
    unsetenv("NN_CACHE_MAX");

    check_set_case("argument check");
    CHECK(load(dir, -2, &wrote, warning, sizeof warning) == NN_ERR_ARG, "cache_max -2 should be refused");
    CHECK(strstr(nn_last_error(), "plan cache cap") != NULL, "error: %s", nn_last_error());

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    return check_summary();
}
