#include "CFuseShim.h"
int kcfs_shim_placeholder(void) { return 0; }
