#ifndef KEYCHAINFS_SDBUS_SHIM_H
#define KEYCHAINFS_SDBUS_SHIM_H
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-bus.h>

/* sd-bus vtables are built by C macros (SD_BUS_METHOD, ...) over a struct with bitfields and
   unions, which Swift cannot write; these build one from plain descriptors instead. Every
   method of a vtable calls one handler and every property one getter (and setter), which
   dispatch on the member name. */
enum kfs_member_kind { KFS_METHOD = 1, KFS_PROPERTY = 2, KFS_WRITABLE_PROPERTY = 3, KFS_SIGNAL = 4 };

typedef struct kfs_member {
    int kind;
    const char *name;
    /* Methods: the argument signature; properties and signals: the value's or arguments'. */
    const char *signature;
    /* Methods: the result signature. */
    const char *result;
    /* Argument names, each ending in NUL, for introspection: inputs then outputs. */
    const char *names;
    /* SD_BUS_VTABLE_* flags. */
    uint64_t flags;
} kfs_member;

/* A vtable of `count` members, allocated with malloc and never freed (it lives as long as the
   bus object that uses it). The strings are copied. */
const sd_bus_vtable *kfs_vtable_build(const kfs_member *members, size_t count,
                                      sd_bus_message_handler_t method,
                                      sd_bus_property_get_t getter,
                                      sd_bus_property_set_t setter);
#endif
