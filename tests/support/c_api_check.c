/* Calls every function of the C API from a C translation unit (compiled as C, so gpumem.h is proven to be
 * valid C) and counts what went wrong. tests/c_api_test.cpp runs it and expects zero. */
#include <gpumem.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int gpumem_c_api_check(void);

#define CHECK(condition)                                                                   \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      fprintf(stderr, "%s:%d: C API check failed: %s (last error: %s)\n", __FILE__, __LINE__, \
              #condition, gpumem_last_error());                                            \
      ++errors;                                                                            \
    }                                                                                      \
  } while (0)

int gpumem_c_api_check(void)
{
  int errors = 0;
  void* p = NULL;
  void* z = NULL;
  void* a = NULL;
  size_t size = 0;
  gpumem_status status;

  /* alloc / allocation_size / free */
  CHECK(gpumem_alloc(1000, &p) == GPUMEM_SUCCESS);
  CHECK(p != NULL);
  CHECK(((uintptr_t)p % 256u) == 0u);
  CHECK(gpumem_allocation_size(p, &size) == GPUMEM_SUCCESS);
  CHECK(size == 1000u);
  CHECK(gpumem_free(p) == GPUMEM_SUCCESS);

  /* double free: invalid value, with a message */
  status = gpumem_free(p);
  CHECK(status == GPUMEM_ERROR_INVALID_VALUE);
  CHECK(strstr(gpumem_last_error(), "already freed") != NULL);
  CHECK(gpumem_allocation_size(p, &size) == GPUMEM_ERROR_INVALID_VALUE);

  /* zeros, and the async pair on the legacy default stream */
  CHECK(gpumem_zeros(4096, &z) == GPUMEM_SUCCESS);
  CHECK(z != NULL);
  CHECK(gpumem_alloc_async(256, NULL, &a) == GPUMEM_SUCCESS);
  CHECK(a != NULL && a != z);
  CHECK(gpumem_free_async(a, NULL) == GPUMEM_SUCCESS);
  CHECK(gpumem_free(z) == GPUMEM_SUCCESS);

  /* zero bytes and NULL */
  p = &errors; /* must be overwritten */
  CHECK(gpumem_alloc(0, &p) == GPUMEM_SUCCESS);
  CHECK(p == NULL);
  CHECK(gpumem_free(NULL) == GPUMEM_SUCCESS);
  CHECK(gpumem_free_async(NULL, NULL) == GPUMEM_SUCCESS);

  /* null out-pointers */
  CHECK(gpumem_alloc(16, NULL) == GPUMEM_ERROR_INVALID_VALUE);
  CHECK(strstr(gpumem_last_error(), "NULL") != NULL);
  CHECK(gpumem_zeros(16, NULL) == GPUMEM_ERROR_INVALID_VALUE);
  CHECK(gpumem_alloc_async(16, NULL, NULL) == GPUMEM_ERROR_INVALID_VALUE);
  CHECK(gpumem_allocation_size(&errors, NULL) == GPUMEM_ERROR_INVALID_VALUE);

  /* an overflowing size */
  p = &errors;
  CHECK(gpumem_alloc(SIZE_MAX, &p) == GPUMEM_ERROR_BAD_ALLOC);
  CHECK(p == NULL);

  /* an unknown pointer */
  CHECK(gpumem_free(&errors) == GPUMEM_ERROR_INVALID_VALUE);
  CHECK(strstr(gpumem_last_error(), "not allocated by gpumem") != NULL);

  /* status strings */
  CHECK(strcmp(gpumem_status_string(GPUMEM_SUCCESS), "success") == 0);
  CHECK(strcmp(gpumem_status_string(GPUMEM_ERROR_OUT_OF_MEMORY), "out of memory") == 0);
  CHECK(gpumem_status_string(GPUMEM_ERROR_BAD_ALLOC)[0] != '\0');
  CHECK(gpumem_status_string(GPUMEM_ERROR_INVALID_VALUE)[0] != '\0');
  CHECK(gpumem_status_string(GPUMEM_ERROR_CUDA)[0] != '\0');
  CHECK(gpumem_status_string(GPUMEM_ERROR_UNKNOWN)[0] != '\0');
  CHECK(gpumem_status_string((gpumem_status)7) != NULL);

  return errors;
}
