#include "sdbus_shim.h"
#include <stdlib.h>
#include <string.h>

static const char *copy(const char *s) { return s ? strdup(s) : NULL; }

static const char *copy_names(const char *names) {
    if (!names) return NULL;
    size_t n = 0;
    while (names[n] != '\0' || names[n + 1] != '\0') n++;
    char *out = malloc(n + 2);
    if (!out) abort();
    memcpy(out, names, n + 2);
    return out;
}

const sd_bus_vtable *kfs_vtable_build(const kfs_member *members, size_t count,
                                      sd_bus_message_handler_t method,
                                      sd_bus_property_get_t getter,
                                      sd_bus_property_set_t setter) {
    sd_bus_vtable *v = calloc(count + 2, sizeof(sd_bus_vtable));
    if (!v) abort();
    v[0] = (sd_bus_vtable)SD_BUS_VTABLE_START(0);
    for (size_t i = 0; i < count; i++) {
        const kfs_member *m = &members[i];
        const char *name = copy(m->name), *sig = copy(m->signature);
        switch (m->kind) {
        case KFS_METHOD:
            v[i + 1] = (sd_bus_vtable){
                .type = _SD_BUS_VTABLE_METHOD, .flags = m->flags,
                .x = { .method = { .member = name, .signature = sig, .result = copy(m->result),
                                   .handler = method, .offset = 0, .names = copy_names(m->names) } } };
            break;
        case KFS_PROPERTY:
            v[i + 1] = (sd_bus_vtable)SD_BUS_PROPERTY(name, sig, getter, 0, m->flags);
            break;
        case KFS_WRITABLE_PROPERTY:
            v[i + 1] = (sd_bus_vtable)SD_BUS_WRITABLE_PROPERTY(name, sig, getter, setter, 0, m->flags);
            break;
        case KFS_SIGNAL:
            v[i + 1] = (sd_bus_vtable){
                .type = _SD_BUS_VTABLE_SIGNAL, .flags = m->flags,
                .x = { .signal = { .member = name, .signature = sig, .names = copy_names(m->names) } } };
            break;
        default:
            abort();
        }
    }
    v[count + 1] = (sd_bus_vtable)SD_BUS_VTABLE_END;
    return v;
}
