/* sm_file: a whole file read into memory (programs, example inputs). */
#ifndef SM_FILE_H
#define SM_FILE_H

#include <stddef.h>

#include "sm_err.h"

/* Reads the file at path into *out, NUL-terminated (malloc'd, owned by the
 * caller; NULL on failure), of at most max bytes (0: any size). SM_EIO
 * ("cannot open 'PATH': REASON", "cannot read ..."), SM_EINVAL ("'PATH' is
 * larger than N MiB") or SM_ENOMEM, each with its sentence in err. */
sm_err sm_file_read_text(const char *path, size_t max, char **out, char *err, size_t errlen);

#endif
