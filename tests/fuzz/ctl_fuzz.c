/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/ctl_fuzz.c - libFuzzer target for the control file's line
 * syntax (fuse/ctl_parse.c): bf_ctl_parse() on what a write(2) to
 * MNT/.sys/control may bring, bf_ctl_format() on what it splits out.
 *
 * The first input byte picks the limits (room for tokens, store size
 * slack, message buffer size), the rest is the line. Oracles:
 *  - the result is a token count in 1..maxargs, or -EINVAL with
 *    a terminated, non-empty message; nothing is written past argv[maxargs]
 *    or the store (ASan sees the exact-size buffers);
 *  - a taken line's tokens lie in the store, hold no control character but
 *    a tab, and take at most len + 1 bytes; a line with a NUL, a newline
 *    before its end, or another control character outside is refused;
 *  - bf_ctl_format() of the tokens parses back to the same tokens, and a
 *    second format gives the same line (a fixed point).
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "../../fuse/ctl_parse.h"
#include "fuzz.h"

#define MAXA 64

static bool is_ctl(unsigned char c)
{
	return (c < 0x20 && c != '\t') || c == 0x7f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *argv[MAXA + 1], *argv2[MAXA + 1], *line, *store, *store2, *fmt, *fmt2, *err;
	size_t len, storelen, errlen, i, used = 0, body, flen;
	int maxargs, argc, argc2, n, n2, k;
	uint8_t knobs;

	if (!size)
		return 0;
	knobs = data[0];
	data++;
	size--;
	maxargs = 1 + (knobs & 0x3f);		/* 1..64 */
	errlen = knobs & 0x40 ? 8 : 256;	/* a small message buffer cuts */
	/* room for the line, or a byte short of it (refused) */
	storelen = size + 1 - (knobs & 0x80 && size ? 1 : 0);
	line = malloc(size ? size : 1);
	store = malloc(storelen);
	err = malloc(errlen);
	if (!line || !store || !err)
		abort();
	memcpy(line, data, size);
	len = size;
	argv[maxargs] = (char *)0x1;	/* the canary past the room */
	argc = bf_ctl_parse(line, len, store, storelen, argv, maxargs, err, errlen);
	fuzz_check(argv[maxargs] == (char *)0x1, "wrote past argv[%d]", maxargs);
	body = len && line[len - 1] == '\n' ? len - 1 : len;
	if (argc < 0) {
		fuzz_check(argc == -EINVAL, "returned %d", argc);
		fuzz_check(memchr(err, 0, errlen) && err[0], "refusal %d without a message", argc);
		goto out;
	}
	fuzz_check(argc >= 1 && argc <= maxargs, "argc %d, maxargs %d", argc, maxargs);
	fuzz_check(body + 1 <= storelen, "took %zu bytes into a %zu-byte store", body, storelen);
	for (i = 0; i < body; i++)
		fuzz_check(!is_ctl((unsigned char)line[i]), "took a control character 0x%02x at %zu",
			   (unsigned char)line[i], i);
	for (k = 0; k < argc; k++) {
		size_t tl;

		fuzz_check(argv[k] >= store && argv[k] < store + storelen, "token %d outside", k);
		tl = strnlen(argv[k], (size_t)(store + storelen - argv[k]));
		fuzz_check(argv[k] + tl < store + storelen, "token %d not terminated", k);
		for (i = 0; i < tl; i++)
			fuzz_check(!is_ctl((unsigned char)argv[k][i]), "token %d holds 0x%02x", k,
				   (unsigned char)argv[k][i]);
		used += tl + 1;
	}
	fuzz_check(used <= body + 1, "tokens take %zu bytes of a %zu-byte line", used, body);
	if (argc < maxargs)
		fuzz_check(argv[argc] == NULL, "no NULL after the last token");

	/* the client's form of the same tokens: back to them, and a fixed point */
	/* at worst every byte escaped, every token quoted, blanks between */
	flen = 2 * size + 3 * (size_t)argc + 2;
	fmt = malloc(flen);
	fmt2 = malloc(flen);
	store2 = malloc(flen);
	if (!fmt || !fmt2 || !store2)
		abort();
	n = bf_ctl_format(argc, argv, fmt, flen);
	fuzz_check(n > 0 && fmt[n - 1] == '\n' && (size_t)n == strlen(fmt), "format: %d", n);
	argc2 = bf_ctl_parse(fmt, (size_t)n, store2, flen, argv2, MAXA, err, errlen);
	fuzz_check(argc2 == argc, "'%s' parses as %d tokens, the original as %d", fmt, argc2,
		   argc);
	for (k = 0; k < argc; k++)
		fuzz_check(!strcmp(argv[k], argv2[k]), "token %d: '%s' came back as '%s'", k, argv[k],
			   argv2[k]);
	n2 = bf_ctl_format(argc2, argv2, fmt2, flen);
	fuzz_check(n2 == n && !memcmp(fmt, fmt2, (size_t)n), "format is no fixed point");
	free(fmt);
	free(fmt2);
	free(store2);
out:
	free(line);
	free(store);
	free(err);
	return 0;
}
