/* The ISA choice (ops/isa.h): made once, NN_ISA overriding it, every name
 * round-tripping, a selection refused for what this CPU lacks, and the GEMM
 * reporting the same family.  tests/run_all.sh runs it under each NN_ISA. */
#include <stdlib.h>

#include "../ops/gemm.h"
#include "../ops/isa.h"
#include "op_harness.h"

int main(void) {
    nn_isa first = nn_isa_active();
    CHECK(nn_isa_active() == first, "the choice changed between two calls: %s then %s", nn_isa_name(first),
          nn_isa_name(nn_isa_active()));
    CHECK(nn_isa_supported(first), "chose %s, which this CPU does not run", nn_isa_name(first));
    const char *env = getenv("NN_ISA");
    nn_isa want;
    if (env && *env && nn_isa_parse(env, &want)) {
        /* what NN_ISA asks for, or the best this CPU runs below it */
        while (want > NN_ISA_SCALAR && !nn_isa_supported(want))
            want--;
        CHECK(first == want, "NN_ISA=%s: chose %s, want %s", env, nn_isa_name(first), nn_isa_name(want));
    } else {
        for (int i = NN_ISA_COUNT - 1; i > (int)first; i--)
            CHECK(!nn_isa_supported((nn_isa)i), "chose %s although %s is supported", nn_isa_name(first),
                  nn_isa_name((nn_isa)i));
    }
    CHECK(!strcmp(nn_gemm_kernel_name(), nn_isa_name(first)), "GEMM kernel %s, ISA %s", nn_gemm_kernel_name(),
          nn_isa_name(first));
    for (int i = 0; i < NN_ISA_COUNT; i++) {
        nn_isa back = NN_ISA_COUNT;
        CHECK(nn_isa_parse(nn_isa_name((nn_isa)i), &back) && back == (nn_isa)i, "name %s does not parse back",
              nn_isa_name((nn_isa)i));
        bool ok = nn_isa_select((nn_isa)i);
        CHECK(ok == nn_isa_supported((nn_isa)i), "select %s gave %d, supported %d", nn_isa_name((nn_isa)i), ok,
              nn_isa_supported((nn_isa)i));
        if (ok)
            CHECK(nn_isa_active() == (nn_isa)i && !strcmp(nn_gemm_kernel_name(), nn_isa_name((nn_isa)i)),
                  "after select %s: active %s, GEMM %s", nn_isa_name((nn_isa)i), nn_isa_name(nn_isa_active()),
                  nn_gemm_kernel_name());
    }
    nn_isa dummy;
    CHECK(!nn_isa_parse("sse9", &dummy) && !nn_isa_parse(NULL, &dummy), "an unknown name parsed");
    CHECK(nn_isa_supported(NN_ISA_SCALAR) && nn_isa_select(NN_ISA_SCALAR), "scalar must always run");
    printf("isa: started as %s\n", nn_isa_name(first));
    return check_summary();
}
