/* files.h: reading a whole file into memory, the one way gen/, runtime/, cli/ and common/ do it:
 * a size cap, a terminating 0 byte for text, and an error that names the file and what went wrong.
 * Works on pipes and /proc files too (it reads until the end instead of trusting the size). And
 * the end of writing a file atomically (file_commit). */
#ifndef BOOST_FILES_H
#define BOOST_FILES_H

#include <stddef.h>
#include <stdio.h>

/* The whole file at path in new memory (caller frees), followed by one 0 byte that *len does not
 * count (len may be NULL). A file of more than max_bytes is refused. NULL with errno set and err
 * one of "PATH: cannot open: REASON", "PATH: cannot read: REASON" (a folder: "Is a directory"),
 * "PATH: larger than N bytes" (errno EFBIG), "PATH: out of memory" (ENOMEM). */
char *file_read_all(const char *path, size_t max_bytes, size_t *len, char *err, size_t errlen);

/* The same for a stream already open (read from where it stands to its end; the caller closes
 * it); name is the file's name for the messages. */
char *file_read_stream(FILE *f, const char *name, size_t max_bytes, size_t *len, char *err,
                       size_t errlen);

/* The end of writing a file through a temporary one (tmp, beside path): checks that every write
 * to f went well, closes f and renames tmp over path, so readers see the old file or the whole new
 * one. 0, or -1 with errno set (EIO for a failed earlier write) and tmp removed. f may be NULL (a
 * failed fopen: -1). */
int file_commit(FILE *f, const char *tmp, const char *path);

#endif
