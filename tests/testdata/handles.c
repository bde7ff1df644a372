/* handles: name_to_handle_at and open_by_handle_at from the command line,
 * for tests/linux_handles_test.go.
 *
 *   handles save PATH HANDLEFILE     writes PATH's file handle to HANDLEFILE
 *   handles read MOUNTDIR HANDLEFILE opens the handle under MOUNTDIR and
 *                                    copies the file to stdout
 *
 * A failure prints "errno N" on stderr and exits with 2. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *what) {
	int e = errno;
	fprintf(stderr, "%s: %s\nerrno %d\n", what, strerror(e), e);
	return 2;
}

int main(int argc, char **argv) {
	if (argc != 4) {
		fprintf(stderr, "usage: handles save|read PATH HANDLEFILE\n");
		return 1;
	}
	if (strcmp(argv[1], "save") == 0) {
		struct file_handle *h = malloc(sizeof(*h) + MAX_HANDLE_SZ);
		int mount_id;
		h->handle_bytes = MAX_HANDLE_SZ;
		if (name_to_handle_at(AT_FDCWD, argv[2], h, &mount_id, 0) < 0)
			return fail("name_to_handle_at");
		FILE *f = fopen(argv[3], "wb");
		if (f == NULL || fwrite(h, sizeof(*h) + h->handle_bytes, 1, f) != 1 || fclose(f) != 0)
			return fail("writing the handle");
		return 0;
	}
	if (strcmp(argv[1], "read") == 0) {
		struct file_handle *h = malloc(sizeof(*h) + MAX_HANDLE_SZ);
		FILE *f = fopen(argv[3], "rb");
		if (f == NULL || fread(h, 1, sizeof(*h) + MAX_HANDLE_SZ, f) < sizeof(*h))
			return fail("reading the handle");
		fclose(f);
		int mfd = open(argv[2], O_RDONLY | O_DIRECTORY);
		if (mfd < 0)
			return fail("open mount");
		int fd = open_by_handle_at(mfd, h, O_RDONLY);
		if (fd < 0)
			return fail("open_by_handle_at");
		char buf[65536];
		ssize_t n;
		while ((n = read(fd, buf, sizeof buf)) > 0)
			if (write(1, buf, n) != n)
				return fail("write");
		if (n < 0)
			return fail("read");
		return 0;
	}
	fprintf(stderr, "unknown command %s\n", argv[1]);
	return 1;
}
