/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/fuzz.h - the libFuzzer entry points the targets define.
 *
 * Each target (conf_fuzz.c, attr_fuzz.c) is built twice by GNUmakefile:
 * with clang -fsanitize=fuzzer,address,undefined into build-fuzz/ (`make
 * fuzz`, libFuzzer's main), and with the normal compiler and replay.c's
 * main (`make test` replays the corpus without libFuzzer).
 *
 * A target checks its own invariants (oracles) besides "no crash": a broken
 * one calls fuzz_fail(), which prints what and aborts, so libFuzzer saves
 * the input as a crash and the replay exits non-zero.
 */
#ifndef BLKFS_FUZZ_H
#define BLKFS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define fuzz_fail(...)							\
	do {								\
		fprintf(stderr, "fuzz: %s:%d: ", __FILE__, __LINE__);	\
		fprintf(stderr, __VA_ARGS__);				\
		fputc('\n', stderr);					\
		abort();						\
	} while (0)

#define fuzz_check(cond, ...)						\
	do {								\
		if (!(cond)) {						\
			fprintf(stderr, "fuzz: %s:%d: check failed: %s: ", \
				__FILE__, __LINE__, #cond);		\
			fprintf(stderr, __VA_ARGS__);			\
			fputc('\n', stderr);				\
			abort();					\
		}							\
	} while (0)

#endif
