#include "CHardening.h"
#include <sys/prctl.h>
#include <sys/resource.h>

int kcfs_make_not_dumpable(void) {
    struct rlimit none = {0, 0};
    int a = prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    int b = setrlimit(RLIMIT_CORE, &none);
    return a == 0 && b == 0 ? 0 : -1;
}
