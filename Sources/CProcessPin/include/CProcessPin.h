#ifndef KEYCHAINFS_CPROCESSPIN_H
#define KEYCHAINFS_CPROCESSPIN_H

#include <spawn.h>
#include <sys/types.h>

/* pidfd_open(2) and SO_PEERPIDFD, which Swift cannot reach: syscall(2) is variadic and
 * Glibc's Swift module does not export <sys/pidfd.h>. Both return a close-on-exec pidfd, or
 * -1 with errno set (ENOPROTOOPT from kcfs_peer_pidfd where the kernel predates 6.5). */
int kcfs_pidfd_open(pid_t pid);
int kcfs_peer_pidfd(int socket);

/* 1 while the process a pidfd refers to runs, 0 once it has exited (its pid may then be
 * anyone's), -1 on error. A pidfd becomes readable when its process exits. */
int kcfs_pidfd_alive(int pidfd);

/* posix_spawn_file_actions_addclosefrom_np (glibc 2.34), declared only under _GNU_SOURCE:
 * a spawned pinentry gets its three descriptors and none of the daemon's. */
int kcfs_spawn_close_from(posix_spawn_file_actions_t *actions, int from);

#endif
