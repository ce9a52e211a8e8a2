/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/replay.c - run a fuzz target over its corpus without libFuzzer.
 *
 *   conf_replay DIR|FILE...
 *
 * Feeds every regular file of each DIR (in name order), or each FILE, to
 * LLVMFuzzerTestOneInput() once, from a buffer of exactly its size (so a
 * sanitizer build sees reads past the end). A target that finds a broken
 * invariant aborts; so does a crash: the exit status says it, and the last
 * "replay: FILE" line on stderr names the input (with REPLAY_VERBOSE=1 every
 * input is named; otherwise only a count is printed at the end).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

/* A target without an initializer gets this one. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

static int verbose;

static int run_file(const char *path)
{
	struct stat st;
	uint8_t *buf;
	size_t done = 0;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	/* exactly its size: 1 byte for an empty file, which gets size 0 */
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		fprintf(stderr, "replay: %s: out of memory\n", path);
		close(fd);
		return -1;
	}
	while (done < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + done, (size_t)st.st_size - done);

		if (r <= 0) {
			fprintf(stderr, "replay: %s: %s\n", path, r ? strerror(errno) : "short read");
			free(buf);
			close(fd);
			return -1;
		}
		done += (size_t)r;
	}
	close(fd);
	if (verbose)
		fprintf(stderr, "replay: %s (%zu bytes)\n", path, done);
	LLVMFuzzerTestOneInput(buf, done);
	free(buf);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of @dir, in name order; returns how many, or -1. */
static int run_dir(const char *dir)
{
	char **names = NULL, path[4096];
	size_t n = 0, cap = 0, i;
	struct dirent *de;
	struct stat st;
	DIR *d = opendir(dir);
	int ret = 0;

	if (!d) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (n == cap) {
			char **v = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof(*v));

			if (!v) {
				ret = -1;
				break;
			}
			names = v;
		}
		names[n] = strdup(de->d_name);
		if (!names[n]) {
			ret = -1;
			break;
		}
		n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), by_name);
	for (i = 0; i < n && !ret; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
			continue;
		if (run_file(path))
			ret = -1;
		else
			ret = 0;
	}
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return ret ? -1 : (int)n;
}

int main(int argc, char **argv)
{
	const char *v = getenv("REPLAY_VERBOSE");
	struct stat st;
	int i, n, total = 0;

	verbose = v && !strcmp(v, "1");
	if (argc < 2) {
		fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
		return 2;
	}
	LLVMFuzzerInitialize(&argc, &argv);
	for (i = 1; i < argc; i++) {
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (S_ISDIR(st.st_mode)) {
			n = run_dir(argv[i]);
		} else {
			n = run_file(argv[i]) ? -1 : 1;
		}
		if (n < 0)
			return 1;
		total += n;
	}
	if (!total) {
		fprintf(stderr, "replay: no inputs in %s\n", argv[1]);
		return 1;
	}
	printf("%s: %d inputs, no failure\n", argv[0], total);
	return 0;
}
