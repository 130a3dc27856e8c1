/* A minimal onnxruntime custom-op library for the tests: domain "recall.test", op "AddOne" (a float tensor in,
 * the same tensor plus one out). Written against onnxruntime's stable C ABI without its header (the wheel ships
 * none): the OrtApi table is an append-only array of function pointers, so the few entries used are taken by
 * their position (unchanged since API version 1), and OrtCustomOp is filled as a version-17 op (its 21 callbacks
 * up to GetEndVersion; the later fields are zero and not read for that version). onnxruntime 1.32 calls the
 * characteristic and arity callbacks whatever the version, so an op that fills only version 1's nine crashes it.
 * Compiled by tests/encoders/custom_op_folder.py with the system C compiler. */
#include <stddef.h>
#include <stdint.h>

typedef void *Status; /* OrtStatus*: NULL is success */
typedef Status (*CreateCustomOpDomainFn)(const char *domain, void **out);
typedef Status (*CustomOpDomainAddFn)(void *domain, const void *op);
typedef Status (*AddCustomOpDomainFn)(void *options, void *domain);
typedef Status (*GetTensorMutableDataFn)(void *value, void **out);
typedef Status (*GetDimensionsCountFn)(const void *info, size_t *out);
typedef Status (*GetDimensionsFn)(const void *info, int64_t *dims, size_t n);
typedef Status (*GetTensorShapeElementCountFn)(const void *info, size_t *out);
typedef Status (*GetTensorTypeAndShapeFn)(const void *value, void **out);
typedef Status (*KernelContextGetInputFn)(const void *context, size_t index, const void **out);
typedef Status (*KernelContextGetOutputFn)(void *context, size_t index, const int64_t *dims, size_t n, void **out);
typedef void (*ReleaseFn)(void *);

/* positions in OrtApi (version 1) */
enum { CREATE_CUSTOM_OP_DOMAIN = 26, CUSTOM_OP_DOMAIN_ADD = 27, ADD_CUSTOM_OP_DOMAIN = 28, GET_TENSOR_MUTABLE_DATA = 51,
       GET_DIMENSIONS_COUNT = 61, GET_DIMENSIONS = 62, GET_TENSOR_SHAPE_ELEMENT_COUNT = 64, GET_TENSOR_TYPE_AND_SHAPE = 65,
       KERNEL_CONTEXT_GET_INPUT = 90, KERNEL_CONTEXT_GET_OUTPUT = 91, RELEASE_TENSOR_TYPE_AND_SHAPE_INFO = 99 };

typedef struct { void *const *(*GetApi)(uint32_t version); const char *(*GetVersionString)(void); } ApiBase;

static void *const *api;
#define CALL(type, index) ((type)api[index])

typedef struct {
  uint32_t version;
  void *(*CreateKernel)(const void *op, const void *api, const void *info);
  const char *(*GetName)(const void *op);
  const char *(*GetExecutionProviderType)(const void *op);
  int (*GetInputType)(const void *op, size_t index);
  size_t (*GetInputTypeCount)(const void *op);
  int (*GetOutputType)(const void *op, size_t index);
  size_t (*GetOutputTypeCount)(const void *op);
  void (*KernelCompute)(void *kernel, void *context);
  void (*KernelDestroy)(void *kernel);
  int (*GetInputCharacteristic)(const void *op, size_t index);
  int (*GetOutputCharacteristic)(const void *op, size_t index);
  int (*GetInputMemoryType)(const void *op, size_t index);
  int (*GetVariadicInputMinArity)(const void *op);
  int (*GetVariadicInputHomogeneity)(const void *op);
  int (*GetVariadicOutputMinArity)(const void *op);
  int (*GetVariadicOutputHomogeneity)(const void *op);
  void *CreateKernelV2, *KernelComputeV2, *InferOutputShapeFn; /* NULL: the version-1 kernel callbacks are used */
  int (*GetStartVersion)(const void *op);
  int (*GetEndVersion)(const void *op);
  void *later[8]; /* fields of versions after 17: zero */
} CustomOp;

static int kernel_state;
static void *create_kernel(const void *op, const void *a, const void *info) { (void)op; (void)a; (void)info; return &kernel_state; }
static const char *name(const void *op) { (void)op; return "AddOne"; }
static const char *provider(const void *op) { (void)op; return NULL; /* the CPU provider */ }
static int float_type(const void *op, size_t index) { (void)op; (void)index; return 1; /* float */ }
static size_t one(const void *op) { (void)op; return 1; }
static void destroy(void *kernel) { (void)kernel; }
static int zero_at(const void *op, size_t index) { (void)op; (void)index; return 0; /* required; default memory */ }
static int one_int(const void *op) { (void)op; return 1; }
static int last_version(const void *op) { (void)op; return 2147483647; }

static void compute(void *kernel, void *context) {
  (void)kernel;
  const void *input;
  void *info, *output;
  size_t rank, count;
  int64_t dims[8];
  float *x, *y;
  CALL(KernelContextGetInputFn, KERNEL_CONTEXT_GET_INPUT)(context, 0, &input);
  CALL(GetTensorTypeAndShapeFn, GET_TENSOR_TYPE_AND_SHAPE)(input, &info);
  CALL(GetDimensionsCountFn, GET_DIMENSIONS_COUNT)(info, &rank);
  if (rank > 8) rank = 8;
  CALL(GetDimensionsFn, GET_DIMENSIONS)(info, dims, rank);
  CALL(GetTensorShapeElementCountFn, GET_TENSOR_SHAPE_ELEMENT_COUNT)(info, &count);
  CALL(ReleaseFn, RELEASE_TENSOR_TYPE_AND_SHAPE_INFO)(info);
  CALL(KernelContextGetOutputFn, KERNEL_CONTEXT_GET_OUTPUT)(context, 0, dims, rank, &output);
  CALL(GetTensorMutableDataFn, GET_TENSOR_MUTABLE_DATA)((void *)input, (void **)&x);
  CALL(GetTensorMutableDataFn, GET_TENSOR_MUTABLE_DATA)(output, (void **)&y);
  for (size_t i = 0; i < count; i++) y[i] = x[i] + 1.0f;
}

static CustomOp add_one = {17, create_kernel, name, provider, float_type, one, float_type, one, compute, destroy,
                           zero_at, zero_at, zero_at, one_int, one_int, one_int, one_int, NULL, NULL, NULL,
                           one_int, last_version, {0}};

Status RegisterCustomOps(void *options, const ApiBase *base) {
  void *domain;
  Status status;
  api = base->GetApi(1);
  if ((status = CALL(CreateCustomOpDomainFn, CREATE_CUSTOM_OP_DOMAIN)("recall.test", &domain))) return status;
  if ((status = CALL(CustomOpDomainAddFn, CUSTOM_OP_DOMAIN_ADD)(domain, &add_one))) return status;
  return CALL(AddCustomOpDomainFn, ADD_CUSTOM_OP_DOMAIN)(options, domain);
}
