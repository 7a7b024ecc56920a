#define FUSE_USE_VERSION 31
#include <fuse3/fuse_lowlevel.h>
