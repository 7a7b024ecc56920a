/*
 * The store's VFS: the system's default SQLite VFS, with one change for WAL files.
 *
 * keychainfs empties the WAL after every commit that replaces or deletes a sealed value
 * (wal_checkpoint(TRUNCATE)), so that no earlier value stays in the store's files. A WAL cut
 * to zero bytes must then grow again at the next commit, and on ext4 a sync of a file that
 * grew commits the journal (the new blocks and size) before it returns: about twice the time
 * of a sync of the same bytes written over blocks the file already has (a commit of 6 WAL
 * pages, 0.31 against 0.18 ms, scripts/bench's machine). So the truncation that the
 * checkpoint asks for is done here as an overwrite: every frame the WAL holds is overwritten
 * with zeros, and the file keeps its length (up to kcfs_wal_kept_bytes; beyond that it is cut
 * off). The next commits write over the zeroed blocks. SQLite reads a WAL whose header is
 * not a valid header as an empty WAL, as it reads a WAL of zero bytes.
 *
 * The header goes first, synced on its own (storeTruncate says why); the frames' zeros are
 * then as durable as the truncation they replace (SQLite syncs neither: the next sync of the
 * WAL, the next durable commit's, carries them; the move of index entries commits without
 * one, StoreDatabase.unsynced, so the zeros may wait for the commit after it, as they wait
 * after a delete no commit follows). It runs inside SQLite's checkpoint, with the WAL's
 * writer and reader locks held, so no connection of any process reads or writes the WAL
 * meanwhile.
 *
 * Which bytes hold frames: SQLite writes a WAL's frames in order from its start, each frame a
 * 24-byte header whose first field, the page number, is never 0. So the frames end at the
 * first frame whose header is all zeros (or at the end of the file), and everything after it
 * was zeroed by an earlier truncation (or the file was cut there). A WAL found at its open
 * (a crash may have left anything), or one whose emptying failed part way (a write error), is
 * zeroed whole at its next truncation.
 *
 * A second change, for speed: a transaction's frames are written with one write. SQLite
 * writes each frame as two writes (its 24-byte header, then its page), and on ext4 each write
 * costs about 4 us whatever its size (16 writes of a 8-frame commit took 70 us here, one write
 * of the same bytes 15). So the frames SQLite appends one after the other are gathered
 * (`pending`) and written when the transaction's last frame is complete (a commit frame's
 * header names the database's size), before anything else is done with the file, when the
 * next write does not continue them, or before the buffer would pass its size. A write that
 * is not such an append (a frame written again in place) is written through. Every frame of a
 * commit is thus in the file, as it was, before SQLite publishes the commit in the WAL index
 * (after its frames' writes, and after their sync when synchronous is FULL): a reader in
 * another process, or a recovery after a crash, sees no difference.
 */
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include "CStoreVFS.h"

const long long kcfs_wal_kept_bytes = 4LL * 1024 * 1024;

static __thread long long lastEmptied;

long long kcfs_store_vfs_take_emptied(void)
{
	long long n = lastEmptied;
	lastEmptied = 0;
	return n;
}

/* Linux reports a failed write-back once, to the descriptors open when it failed: a later
 * sync of the same pages through a new descriptor succeeds though they never reached the
 * disk. A failed sync of the WAL is remembered here for the caller of the checkpoint. */
static __thread int walSyncFailed;

int kcfs_store_vfs_take_wal_sync_failed(void)
{
	int failed = walSyncFailed;
	walSyncFailed = 0;
	return failed;
}

typedef struct StoreFile {
	sqlite3_file base;
	int isWAL;
	/* The WAL may hold frames after its first frame header of zeros, where framesEnd stops
	 * looking: its bytes are those found at its open (no truncation through this handle yet),
	 * or an emptying failed part way through its frames. The next emptying zeroes all it keeps. */
	int untouched;
	/* The last write was a new WAL header over a header of zeros (storeWrite). */
	int headerOverZeros;
	/* Frames not written yet (see above): pendingLength bytes from pendingAt, in a buffer of
	 * PENDING_CAPACITY; commitPageDue: the last write was a commit frame's header. */
	unsigned char *pending;
	int pendingLength, commitPageDue;
	sqlite3_int64 pendingAt;
	/* Where the last frame write through this handle ended (32 after a new header): only a
	 * write there, an append, is gathered. */
	sqlite3_int64 appendEnd;
	/* A commit frame's header was gathered in the write transaction under way: whatever SQLite
	 * writes after it (copies of the frame that pad a commit to a sector, a write split around
	 * a sync) is written at once, before SQLite publishes the commit. */
	int commitTail;
	/* A database's handle: its WAL's; a WAL's: its database's (storeOpen links them). */
	struct StoreFile *wal, *db;
	sqlite3_file *real; /* follows this struct, in the same allocation */
} StoreFile;

static sqlite3_vfs *realVFS;
static sqlite3_vfs storeVFS;
static sqlite3_io_methods storeMethods;

#define REAL(f) (((StoreFile *)(f))->real)

/* The gathered frames, written. On an error they are dropped, as a failed write's bytes are:
 * SQLite gives up the transaction. */
static int writePending(StoreFile *p)
{
	p->commitPageDue = 0;
	if (p->pendingLength == 0)
		return SQLITE_OK;
	int rc = p->real->pMethods->xWrite(p->real, p->pending, p->pendingLength, p->pendingAt);
	p->pendingLength = 0;
	return rc;
}

/* Larger than a commit of a few dozen frames; a transaction that writes more writes in runs.
 * Below 128 KiB: the unix VFS's write keeps only the low 17 bits of a length (seekAndWriteFd),
 * as SQLite never writes more at once. */
#define PENDING_CAPACITY (120 * 1024)

/* Gathers a frame's write (storeWrite decides which are), or writes it through. */
static int gatherFrameWrite(StoreFile *p, const void *b, int n, sqlite3_int64 o)
{
	const unsigned char *h = b;
	/* Set by the write before, a commit frame's header: this is its page, the transaction's last. */
	int commitPage = p->commitPageDue;
	sqlite3_int64 end = p->pendingLength > 0 ? p->pendingAt + p->pendingLength : p->appendEnd;
	if (p->pending == NULL && o == end && n <= PENDING_CAPACITY)
		p->pending = sqlite3_malloc(PENDING_CAPACITY);
	int rc;
	if (o != end || n > PENDING_CAPACITY || p->pending == NULL) {
		/* Not an append after what this handle wrote: SQLite writing a frame's page or header
		 * again in place (a page changed twice in a transaction that spilled, the checksums it
		 * then rewrites up to the commit frame), or appending after another connection's
		 * frames. Written through, after what is gathered. */
		rc = writePending(p);
		if (rc == SQLITE_OK)
			rc = p->real->pMethods->xWrite(p->real, b, n, o);
	} else {
		rc = p->pendingLength + n > PENDING_CAPACITY ? writePending(p) : SQLITE_OK;
		if (rc == SQLITE_OK) {
			if (p->pendingLength == 0)
				p->pendingAt = o;
			memcpy(p->pending + p->pendingLength, b, (size_t)n);
			p->pendingLength += n;
			if (commitPage || p->commitTail)
				rc = writePending(p);
		}
	}
	p->appendEnd = o + n;
	/* A frame header (24 bytes) whose second field, the database's size after a commit, is not
	 * 0: the next write, its page, ends the transaction. */
	p->commitPageDue = rc == SQLITE_OK && n == 24 && (h[4] | h[5] | h[6] | h[7]) != 0;
	p->commitTail |= p->commitPageDue;
	return rc;
}

/*
 * On the database's handle: its WAL's gathered frames are written before any lock of the WAL
 * index (or of the database) changes. A write transaction ends with the release of the WAL's
 * write lock, committed or rolled back: the frames of one rolled back after it spilled are
 * still gathered then (SQLite only forgets them), and written later they would land over the
 * frames another connection has written there since, under the same salts, and replace its
 * commit. Written now, while the write lock is held, they land where SQLite itself would have
 * put them, past the WAL's last frame. An error is returned when a lock is taken; a release
 * cannot fail, and what it could not write was a rolled-back transaction's.
 */
static int walWrittenAtLockChange(sqlite3_file *f)
{
	StoreFile *wal = ((StoreFile *)f)->wal;
	if (wal == NULL)
		return SQLITE_OK;
	wal->commitTail = 0;
	return writePending(wal);
}

/* Whatever a method does with the file, the gathered frames are in it first. */
#define WRITTEN_FIRST(f)                                    \
	do {                                                    \
		int pendingRC = writePending((StoreFile *)(f));     \
		if (pendingRC != SQLITE_OK)                         \
			return pendingRC;                               \
	} while (0)

static int storeClose(sqlite3_file *f)
{
	StoreFile *p = (StoreFile *)f;
	int pendingRC = writePending(p);
	if (p->db != NULL)
		p->db->wal = NULL;
	if (p->wal != NULL)
		p->wal->db = NULL;
	sqlite3_free(p->pending);
	p->pending = NULL;
	int rc = p->real->pMethods->xClose(p->real);
	return rc != SQLITE_OK ? rc : pendingRC;
}
static int storeRead(sqlite3_file *f, void *b, int n, sqlite3_int64 o) { WRITTEN_FIRST(f); return REAL(f)->pMethods->xRead(REAL(f), b, n, o); }
/*
 * SQLite syncs a restarted WAL's new header before it writes the frames, so that frames
 * landing on disk before the header cannot cut short the old generation's chain of frames
 * (which recovery would replay over newer pages). Over a header that storeTruncate zeroed
 * and synced, there is no old chain to cut: the old frames cannot be read back under any
 * header, and the new frames are read only under the new one, each transaction once its
 * last frame is there, as always. So that sync is left out there: the emptying's own sync of
 * the header takes its place, and an erasing commit costs no more syncs than before.
 * Zeros at the header's place are only ever a synced emptying's (or an empty file): SQLite
 * writes a valid header there, and a truncation cuts the file, all or nothing. Zeros found at
 * the open are not trusted until this handle's first emptying has written and synced them
 * (a process killed before its sync left them in the page cache only).
 */
static int storeWrite(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
	StoreFile *p = (StoreFile *)f;
	sqlite3_file *real = p->real;
	p->headerOverZeros = 0;
	/* Frames follow the 32-byte header. */
	if (p->isWAL && o >= 32)
		return gatherFrameWrite(p, b, n, o);
	WRITTEN_FIRST(f);
	if (p->isWAL && o == 0 && n == 32 && !p->untouched) {
		static const unsigned char zero[32];
		unsigned char head[32];
		int rc = real->pMethods->xRead(real, head, 32, 0);
		if ((rc == SQLITE_OK || rc == SQLITE_IOERR_SHORT_READ) && memcmp(head, zero, 32) == 0) {
			rc = real->pMethods->xWrite(real, b, n, o);
			p->headerOverZeros = rc == SQLITE_OK;
			p->appendEnd = 32;
			return rc;
		}
	}
	if (p->isWAL && o == 0 && n == 32)
		p->appendEnd = 32;
	return real->pMethods->xWrite(real, b, n, o);
}

static int storeSync(sqlite3_file *f, int flags)
{
	StoreFile *p = (StoreFile *)f;
	WRITTEN_FIRST(f);
	if (p->headerOverZeros) {
		p->headerOverZeros = 0;
		return SQLITE_OK;
	}
	int rc = REAL(f)->pMethods->xSync(REAL(f), flags);
	if (rc != SQLITE_OK && p->isWAL)
		walSyncFailed = 1;
	return rc;
}
static int storeFileSize(sqlite3_file *f, sqlite3_int64 *s) { WRITTEN_FIRST(f); return REAL(f)->pMethods->xFileSize(REAL(f), s); }
static int storeLock(sqlite3_file *f, int l)
{
	int rc = walWrittenAtLockChange(f);
	if (rc != SQLITE_OK)
		return rc;
	WRITTEN_FIRST(f);
	return REAL(f)->pMethods->xLock(REAL(f), l);
}
static int storeUnlock(sqlite3_file *f, int l) { walWrittenAtLockChange(f); WRITTEN_FIRST(f); return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int storeCheckReservedLock(sqlite3_file *f, int *r) { WRITTEN_FIRST(f); return REAL(f)->pMethods->xCheckReservedLock(REAL(f), r); }
static int storeFileControl(sqlite3_file *f, int op, void *a) { WRITTEN_FIRST(f); return REAL(f)->pMethods->xFileControl(REAL(f), op, a); }
static int storeSectorSize(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int storeDeviceCharacteristics(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int storeShmMap(sqlite3_file *f, int i, int sz, int ext, void volatile **p) { WRITTEN_FIRST(f); return REAL(f)->pMethods->xShmMap(REAL(f), i, sz, ext, p); }
static int storeShmLock(sqlite3_file *f, int o, int n, int fl)
{
	int rc = walWrittenAtLockChange(f);
	if (rc != SQLITE_OK && !(fl & SQLITE_SHM_UNLOCK))
		return rc;
	WRITTEN_FIRST(f);
	return REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl);
}
static void storeShmBarrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int storeShmUnmap(sqlite3_file *f, int d) { WRITTEN_FIRST(f); return REAL(f)->pMethods->xShmUnmap(REAL(f), d); }
static int storeFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **p) { WRITTEN_FIRST(f); return REAL(f)->pMethods->xFetch(REAL(f), o, n, p); }
static int storeUnfetch(sqlite3_file *f, sqlite3_int64 o, void *p) { WRITTEN_FIRST(f); return REAL(f)->pMethods->xUnfetch(REAL(f), o, p); }

static unsigned get32(const unsigned char *p) { return (unsigned)p[0] << 24 | (unsigned)p[1] << 16 | (unsigned)p[2] << 8 | p[3]; }

/* Where the WAL's frames end: the offset of the first frame with an all-zero header, or
 * `size`; 0 under a header of zeros. A header that is not a WAL's (garbage) holds no frames
 * SQLite would read, but its bytes are zeroed all the same: `size` then. */
static int framesEnd(sqlite3_file *real, sqlite3_int64 size, sqlite3_int64 *end)
{
	unsigned char head[32];
	*end = size;
	if (size < 32)
		return SQLITE_OK;
	int rc = real->pMethods->xRead(real, head, 32, 0);
	if (rc != SQLITE_OK)
		return rc;
	/* A header of zeros is an emptying's, and nothing was written since (a commit writes a
	 * header first): there is nothing to zero. */
	static const unsigned char zeroHeader[32];
	if (memcmp(head, zeroHeader, 32) == 0) {
		*end = 0;
		return SQLITE_OK;
	}
	unsigned magic = get32(head), pageSize = get32(head + 8);
	if ((magic & 0xFFFFFFFE) != 0x377f0682 || pageSize < 512 || pageSize > 65536 || (pageSize & (pageSize - 1)))
		return SQLITE_OK;
	/* Read in runs of frames, not a read per frame: after a run of creates the WAL holds a
	 * thousand frames. */
	static const unsigned char zero[24];
	sqlite3_int64 frame = 24 + (sqlite3_int64)pageSize;
	const sqlite3_int64 perRun = 64;
	unsigned char *run = sqlite3_malloc64((sqlite3_uint64)(frame * perRun));
	if (run == NULL)
		return SQLITE_NOMEM;
	for (sqlite3_int64 at = 32; at + 24 <= size; at += frame * perRun) {
		sqlite3_int64 n = size - at < frame * perRun ? size - at : frame * perRun;
		/* A short read fills the rest with zeros (SQLITE_IOERR_SHORT_READ): the end of the file. */
		rc = real->pMethods->xRead(real, run, (int)n, at);
		if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ)
			break;
		rc = SQLITE_OK;
		for (sqlite3_int64 f = 0; f + 24 <= n; f += frame) {
			if (memcmp(run + f, zero, 24) == 0) {
				*end = at + f;
				sqlite3_free(run);
				return SQLITE_OK;
			}
		}
	}
	sqlite3_free(run);
	return rc;
}

static int storeTruncate(sqlite3_file *f, sqlite3_int64 size)
{
	StoreFile *p = (StoreFile *)f;
	sqlite3_file *real = p->real;
	WRITTEN_FIRST(f);
	p->headerOverZeros = 0;
	if (!p->isWAL || size != 0)
		return real->pMethods->xTruncate(real, size);
	sqlite3_int64 have = 0, end = 0;
	int rc = real->pMethods->xFileSize(real, &have);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_int64 keep = have < kcfs_wal_kept_bytes ? have : kcfs_wal_kept_bytes;
	if (p->untouched) {
		end = keep;
	} else {
		rc = framesEnd(real, keep, &end);
		if (rc != SQLITE_OK)
			return rc;
	}
	/* First the header, made durable on its own: frames zeroed on disk under the old header
	 * still there (the page cache writes back in no set order, and a disk with a volatile
	 * cache persists in none) would leave a shorter chain of the old frames, which recovery
	 * after a power loss would replay over the newer pages the checkpoint wrote (SQLite syncs
	 * a restarted WAL's new header before its frames for the same reason). With the header
	 * gone first, no frame of the old generation can be read back, whatever else lands. */
	static const unsigned char zeros[65536];
	if (end >= 32) {
		unsigned char head[32];
		rc = real->pMethods->xRead(real, head, 32, 0);
		if (rc != SQLITE_OK)
			return rc;
		/* Zeros found at the open may be a killed process's, never synced: written again
		 * and synced, as if they were the old header. */
		if (memcmp(head, zeros, 32) != 0 || p->untouched) {
			rc = real->pMethods->xWrite(real, zeros, 32, 0);
			if (rc == SQLITE_OK)
				rc = real->pMethods->xSync(real, SQLITE_SYNC_NORMAL);
			if (rc != SQLITE_OK) {
				/* Zeros there must always be synced ones (storeWrite relies on it). */
				real->pMethods->xWrite(real, head, 32, 0);
				return rc;
			}
		}
	}
	for (sqlite3_int64 at = 0; at < end; at += sizeof zeros) {
		int n = end - at < (sqlite3_int64)sizeof zeros ? (int)(end - at) : (int)sizeof zeros;
		rc = real->pMethods->xWrite(real, zeros, n, at);
		if (rc != SQLITE_OK) {
			/* The frames before `at` are zeros now, the ones after it are not: the next
			 * emptying would stop at the first and leave the rest for good. */
			p->untouched = 1;
			return rc;
		}
	}
	if (have > keep) {
		rc = real->pMethods->xTruncate(real, keep);
		if (rc != SQLITE_OK)
			return rc;
	}
	p->untouched = 0;
	lastEmptied += end;
	return SQLITE_OK;
}

static int storeOpen(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags, int *outFlags)
{
	(void)vfs;
	StoreFile *p = (StoreFile *)f;
	memset(p, 0, sizeof *p);
	p->real = (sqlite3_file *)&p[1];
	int rc = realVFS->xOpen(realVFS, name, p->real, flags, outFlags);
	/* SQLite closes a file whose pMethods is set, even when its open failed. */
	p->base.pMethods = p->real->pMethods ? &storeMethods : NULL;
	p->isWAL = (flags & SQLITE_OPEN_WAL) != 0;
	p->untouched = 1;
	/* SQLite names a WAL by a string it keeps beside its database's name, from which it
	 * finds the database's handle: opened through this VFS too, as the default. */
	if (p->isWAL && rc == SQLITE_OK && p->base.pMethods != NULL) {
		sqlite3_file *db = sqlite3_database_file_object(name);
		if (db != NULL && db->pMethods == &storeMethods) {
			p->db = (StoreFile *)db;
			p->db->wal = p;
		}
	}
	return rc;
}

static int storeDelete(sqlite3_vfs *v, const char *n, int s) { (void)v; return realVFS->xDelete(realVFS, n, s); }
static int storeAccess(sqlite3_vfs *v, const char *n, int fl, int *r) { (void)v; return realVFS->xAccess(realVFS, n, fl, r); }
static int storeFullPathname(sqlite3_vfs *v, const char *n, int sz, char *out) { (void)v; return realVFS->xFullPathname(realVFS, n, sz, out); }
static void *storeDlOpen(sqlite3_vfs *v, const char *n) { (void)v; return realVFS->xDlOpen(realVFS, n); }
static void storeDlError(sqlite3_vfs *v, int n, char *m) { (void)v; realVFS->xDlError(realVFS, n, m); }
static void (*storeDlSym(sqlite3_vfs *v, void *h, const char *s))(void) { (void)v; return realVFS->xDlSym(realVFS, h, s); }
static void storeDlClose(sqlite3_vfs *v, void *h) { (void)v; realVFS->xDlClose(realVFS, h); }
static int storeRandomness(sqlite3_vfs *v, int n, char *out) { (void)v; return realVFS->xRandomness(realVFS, n, out); }
static int storeSleep(sqlite3_vfs *v, int us) { (void)v; return realVFS->xSleep(realVFS, us); }
static int storeCurrentTime(sqlite3_vfs *v, double *t) { (void)v; return realVFS->xCurrentTime(realVFS, t); }
static int storeGetLastError(sqlite3_vfs *v, int n, char *m) { (void)v; return realVFS->xGetLastError(realVFS, n, m); }
static int storeCurrentTimeInt64(sqlite3_vfs *v, sqlite3_int64 *t) { (void)v; return realVFS->xCurrentTimeInt64(realVFS, t); }

static int installed = SQLITE_ERROR;

static void install(void)
{
	realVFS = sqlite3_vfs_find(NULL);
	if (realVFS == NULL || realVFS->iVersion < 2) {
		installed = SQLITE_ERROR;
		return;
	}
	storeMethods = (sqlite3_io_methods){
		.iVersion = 3,
		.xClose = storeClose, .xRead = storeRead, .xWrite = storeWrite, .xTruncate = storeTruncate,
		.xSync = storeSync, .xFileSize = storeFileSize, .xLock = storeLock, .xUnlock = storeUnlock,
		.xCheckReservedLock = storeCheckReservedLock, .xFileControl = storeFileControl,
		.xSectorSize = storeSectorSize, .xDeviceCharacteristics = storeDeviceCharacteristics,
		.xShmMap = storeShmMap, .xShmLock = storeShmLock, .xShmBarrier = storeShmBarrier,
		.xShmUnmap = storeShmUnmap, .xFetch = storeFetch, .xUnfetch = storeUnfetch,
	};
	storeVFS = (sqlite3_vfs){
		.iVersion = 2,
		.szOsFile = (int)sizeof(StoreFile) + realVFS->szOsFile,
		.mxPathname = realVFS->mxPathname,
		.zName = "keychainfs-store",
		.xOpen = storeOpen, .xDelete = storeDelete, .xAccess = storeAccess,
		.xFullPathname = storeFullPathname, .xDlOpen = storeDlOpen, .xDlError = storeDlError,
		.xDlSym = storeDlSym, .xDlClose = storeDlClose, .xRandomness = storeRandomness,
		.xSleep = storeSleep, .xCurrentTime = storeCurrentTime, .xGetLastError = storeGetLastError,
		.xCurrentTimeInt64 = storeCurrentTimeInt64,
	};
	installed = sqlite3_vfs_register(&storeVFS, 1);
}

int kcfs_store_vfs_install(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, install);
	return installed;
}
