/*
 * sqlitebench DB MODE update N | sqlitebench DB MODE create PREFIX N: the
 * sqlite3 floor for durable writes, as a careful application would make them:
 * synchronous=FULL, one transaction per operation, a prepared statement, a
 * 32-byte blob under a text key.  update upserts one key N times; create
 * inserts N new keys.  MODE is the guarantee:
 *   wal       WAL, nothing more (replaced values stay in the WAL)
 *   wal-wipe  WAL + secure_delete + wal_checkpoint(TRUNCATE) after each write:
 *             no replaced value is left in the files (keychainfs's guarantee)
 *   rollback-wipe  rollback journal (journal_mode=TRUNCATE) + secure_delete:
 *             the same guarantee; the journal holding the old page is cut to
 *             zero bytes at each commit
 * Prints "<ns per operation> ns/op <bytes written per operation> B/op", the
 * bytes from /proc/self/io.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Each operation writes a different value: SQLite skips writing a row that
 * does not change, which would leave nothing to make durable. */
static char secret[] = "0123456789abcdef0123456789abcdef";

static void vary(long i)
{
	char head[17];
	snprintf(head, sizeof head, "%016lx", i);
	memcpy(secret, head, 16);
}

static void check(int rc, sqlite3 *db, const char *what)
{
	if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
		fprintf(stderr, "sqlitebench: %s: %s\n", what, sqlite3_errmsg(db));
		exit(1);
	}
}

static long long written(void)
{
	char line[256];
	long long v = -1;
	FILE *f = fopen("/proc/self/io", "r");
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "write_bytes: %lld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char *argv[])
{
	int create = argc == 6 && strcmp(argv[3], "create") == 0;
	const char *mode = argc > 2 ? argv[2] : "";
	int wal = strcmp(mode, "wal") == 0, wal_wipe = strcmp(mode, "wal-wipe") == 0;
	int rollback_wipe = strcmp(mode, "rollback-wipe") == 0;
	if ((!create && !(argc == 5 && strcmp(argv[3], "update") == 0)) || !(wal || wal_wipe || rollback_wipe)) {
		fprintf(stderr, "usage: sqlitebench DB wal|wal-wipe|rollback-wipe update N\n"
			"       sqlitebench DB wal|wal-wipe|rollback-wipe create PREFIX N\n");
		return 2;
	}
	long n = atol(argv[argc - 1]);
	sqlite3 *db;
	sqlite3_stmt *st;
	check(sqlite3_open(argv[1], &db), db, "open");
	check(sqlite3_exec(db, rollback_wipe ? "PRAGMA journal_mode=TRUNCATE" : "PRAGMA journal_mode=WAL",
			   NULL, NULL, NULL), db, "journal_mode");
	check(sqlite3_exec(db, wal ? "PRAGMA secure_delete=OFF" : "PRAGMA secure_delete=ON",
			   NULL, NULL, NULL), db, "secure_delete");
	check(sqlite3_exec(db, "PRAGMA synchronous=FULL;"
			   "CREATE TABLE IF NOT EXISTS items (name TEXT PRIMARY KEY, secret BLOB NOT NULL)",
			   NULL, NULL, NULL), db, "schema");
	check(sqlite3_prepare_v2(db, "INSERT INTO items (name, secret) VALUES (?, ?) "
				 "ON CONFLICT (name) DO UPDATE SET secret = excluded.secret", -1, &st, NULL),
	      db, "prepare");
	char name[256];
	long long before = written();
	double start = now_ns();
	for (long i = 0; i < n; i++) {
		vary(i);
		if (create)
			snprintf(name, sizeof name, "%s%ld", argv[4], i);
		else
			strcpy(name, "update");
		sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_blob(st, 2, secret, sizeof secret - 1, SQLITE_STATIC);
		check(sqlite3_step(st), db, "step");
		sqlite3_reset(st);
		/* The replaced page is in the WAL until a checkpoint copies the WAL
		 * into the database (synced) and cuts it to zero bytes. */
		if (wal_wipe)
			check(sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL),
			      db, "checkpoint");
	}
	double per = (now_ns() - start) / n;
	printf("%.0f ns/op %.0f B/op\n", per, (double)(written() - before) / n);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return 0;
}
