// batchd._batchd: the Python binding of batchd::Loader. Each batch's tensors
// leave as SlotView objects that share ownership of the batch's ring slot and
// expose it three ways: DLPack (__dlpack__, for torch and JAX, whichever
// build the user has; this module never links either), and numpy's
// __array_interface__ (any numpy, no DLPack needed). Every consumer views
// shared memory without a copy, and the slot goes back to the server when the
// last of those arrays dies. The package batchd/__init__.py turns the views
// into a dict of torch tensors, numpy arrays or JAX arrays.
//
// Thread safety: the GIL is released while a call waits (Open, Next); one
// mutex per Loader keeps Next and close from overlapping, since the C++
// Loader allows one Next at a time. Tensors may die on any thread.
#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "batchd/loader.h"
#include "batchd/version.h"

namespace py = pybind11;

namespace batchd {
namespace {

// Longest stretch Next() waits in C++ before it takes the GIL back to check
// for signals: a trainer blocked on data must still stop on Ctrl-C.
constexpr double kSignalCheckSeconds = 0.2;

// Exception types, made once at import. References are kept for the life of
// the process on purpose: dropping them at exit would touch a finalised
// interpreter.
struct ErrorTypes {
  PyObject* error = nullptr;              // any batchd failure
  PyObject* unavailable = nullptr;        // server stopped or unreachable
  PyObject* cancelled = nullptr;          // stream closed
  PyObject* deadline_exceeded = nullptr;  // timeout
  PyObject* invalid_argument = nullptr;   // bad spec or arguments
};
ErrorTypes errors;

// The type is named batchd.X (not batchd._batchd.X): the package re-exports
// it, so tracebacks and pickles name the public module.
PyObject* AddErrorType(py::module_& m, const char* name, py::handle bases,
                       const char* doc) {
  std::string qualified = std::string("batchd.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc,
                                             bases.ptr(), /*dict=*/nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.attr(name) = py::handle(type);
  return type;
}

PyObject* ErrorTypeFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
      return errors.unavailable;
    case absl::StatusCode::kCancelled:
      return errors.cancelled;
    case absl::StatusCode::kDeadlineExceeded:
      return errors.deadline_exceeded;
    case absl::StatusCode::kInvalidArgument:
      return errors.invalid_argument;
    default:
      return errors.error;
  }
}

// Raises the Python exception for a failed status; `code` carries the
// status code's name ("OUT_OF_RANGE", ...) for codes without their own type.
[[noreturn]] void Raise(const absl::Status& status) {
  py::handle type = ErrorTypeFor(status.code());
  py::object error = type(std::string(status.message()));
  error.attr("code") = absl::StatusCodeToString(status.code());
  PyErr_SetObject(type.ptr(), error.ptr());
  throw py::error_already_set();
}

// What a DLManagedTensor points to. Owning a share of the slot here is what
// keeps the slot (and the mapping) alive while torch holds the tensor.
struct ManagedTensor {
  DLManagedTensor dl;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  std::shared_ptr<SlotLease> lease;
};

// Called by the consumer (torch) when its tensor dies, possibly on another
// thread and without the GIL: it must not touch Python.
void DeleteManagedTensor(DLManagedTensor* self) {
  delete static_cast<ManagedTensor*>(self->manager_ctx);
}

// A capsule nobody consumed still owns its tensor; a consumer renames the
// capsule to "used_dltensor" and owns the tensor from then on.
void DeleteUnusedCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* dl =
      static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  dl->deleter(dl);
}

// `uint64_as_int64`: torch has no uint64 (1.13), so torch gets the same bits
// as int64; numpy and JAX get uint64.
absl::StatusOr<DLDataType> ToDLDataType(DType dtype, bool uint64_as_int64) {
  switch (dtype) {
    case DType::kUInt8:
      return DLDataType{kDLUInt, 8, 1};
    case DType::kInt32:
      return DLDataType{kDLInt, 32, 1};
    case DType::kInt64:
      return DLDataType{kDLInt, 64, 1};
    case DType::kFloat32:
      return DLDataType{kDLFloat, 32, 1};
    case DType::kUInt64:
      // As int64 for torch: ids, epochs and positions stay far below 2^63
      // and read the same; the all-ones id of eval padding reads -1.
      return uint64_as_int64 ? DLDataType{kDLInt, 64, 1}
                             : DLDataType{kDLUInt, 64, 1};
  }
  return absl::InternalError(
      absl::StrFormat("tensor of unknown dtype %u", uint32_t(dtype)));
}

py::capsule MakeCapsule(const Tensor& tensor,
                        const std::shared_ptr<SlotLease>& lease,
                        bool uint64_as_int64) {
  absl::StatusOr<DLDataType> dtype =
      ToDLDataType(tensor.dtype, uint64_as_int64);
  if (!dtype.ok()) Raise(dtype.status());
  auto managed = std::make_unique<ManagedTensor>();
  managed->lease = lease;
  managed->shape = tensor.shape;
  managed->strides.resize(tensor.shape.size());
  int64_t stride = 1;  // row-major, in elements as DLPack counts them
  for (size_t i = tensor.shape.size(); i-- > 0;) {
    managed->strides[i] = stride;
    stride *= tensor.shape[i];
  }
  DLTensor& dl = managed->dl.dl_tensor;
  dl.data = tensor.data;
  dl.device = DLDevice{kDLCPU, 0};
  dl.ndim = int(managed->shape.size());
  dl.dtype = *dtype;
  dl.shape = managed->shape.data();
  dl.strides = managed->strides.data();
  dl.byte_offset = 0;
  managed->dl.manager_ctx = managed.get();
  managed->dl.deleter = DeleteManagedTensor;
  py::capsule capsule(&managed->dl, "dltensor", DeleteUnusedCapsule);
  managed.release();  // the capsule owns it now
  return capsule;
}

// numpy's typestr of a dtype (little-endian: the ring is written by a server
// on the same machine).
const char* TypeString(DType dtype) {
  switch (dtype) {
    case DType::kUInt8:
      return "|u1";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kFloat32:
      return "<f4";
    case DType::kUInt64:
      return "<u8";
  }
  return "|V1";
}

// One tensor of a batch, as Python sees it before any framework does: it
// holds a share of the slot, so whatever views it (a torch tensor through
// __dlpack__, a numpy array through __array_interface__, whose .base it
// becomes) keeps the slot, and dropping every view frees it.
class SlotView {
 public:
  SlotView(Tensor tensor, std::shared_ptr<SlotLease> lease,
           bool uint64_as_int64)
      : tensor_(std::move(tensor)),
        lease_(std::move(lease)),
        uint64_as_int64_(uint64_as_int64) {}

  // The array API's producer side. `stream` means nothing on the CPU;
  // `max_version` asks for a versioned capsule, which a producer may decline
  // by returning the unversioned kind (all DLPack 0.x/1.x consumers read
  // it); copy=True asks for a copy, which a view cannot be.
  py::capsule DLPack(py::object stream, py::object max_version,
                     py::object dl_device, py::object copy) const {
    if (!copy.is_none() && copy.cast<bool>()) {
      throw py::buffer_error(
          "batchd hands out views of shared memory; copy after importing");
    }
    return MakeCapsule(tensor_, lease_, uint64_as_int64_);
  }

  py::dict ArrayInterface() const {
    py::dict d;
    py::tuple shape(tensor_.shape.size());
    for (size_t i = 0; i < tensor_.shape.size(); ++i) {
      shape[i] = py::int_(tensor_.shape[i]);
    }
    d["shape"] = shape;
    d["typestr"] = uint64_as_int64_ && tensor_.dtype == DType::kUInt64
                       ? "<i8"
                       : TypeString(tensor_.dtype);
    d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(tensor_.data),
                               /*read_only=*/false);
    d["strides"] = py::none();  // C-contiguous
    d["version"] = 3;
    return d;
  }

  const std::string& name() const { return tensor_.name; }
  std::string dtype() const {
    return uint64_as_int64_ && tensor_.dtype == DType::kUInt64
               ? "int64"
               : DTypeName(tensor_.dtype);
  }
  py::tuple shape() const {
    py::tuple shape(tensor_.shape.size());
    for (size_t i = 0; i < tensor_.shape.size(); ++i) {
      shape[i] = py::int_(tensor_.shape[i]);
    }
    return shape;
  }

 private:
  const Tensor tensor_;
  const std::shared_ptr<SlotLease> lease_;
  const bool uint64_as_int64_;
};

// The C++ Loader and what Python asks of it. The user's timeout is applied
// here, in slices of kSignalCheckSeconds (see there).
class PyLoader {
 public:
  explicit PyLoader(LoaderOptions options)
      : stream_(options.stream), timeout_seconds_(options.timeout_seconds) {
    options.timeout_seconds =
        timeout_seconds_ < 0 ? kSignalCheckSeconds
                             : std::min(timeout_seconds_, kSignalCheckSeconds);
    absl::StatusOr<std::unique_ptr<Loader>> loader;
    {
      py::gil_scoped_release release;
      loader = Loader::Open(options);
    }
    if (!loader.ok()) Raise(loader.status());
    loader_ = *std::move(loader);
    info_ = loader_->info();
  }

  // Returns ([(name, SlotView), ...], (step, epoch, position, valid_count,
  // (cursor epoch, window, row))). Raises StopIteration at the end of an
  // eval stream. `uint64_as_int64` is for torch (see ToDLDataType).
  py::tuple Next(bool uint64_as_int64) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    for (;;) {
      absl::StatusOr<Batch> batch;
      {
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(mu_);
        if (loader_ == nullptr) {
          batch = absl::FailedPreconditionError("the Loader is closed");
        } else {
          batch = loader_->Next();
        }
      }
      if (batch.ok()) return ToPython(*batch, uint64_as_int64);
      if (absl::IsOutOfRange(batch.status())) throw py::stop_iteration();
      if (!absl::IsDeadlineExceeded(batch.status())) Raise(batch.status());
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      const double waited =
          std::chrono::duration<double>(Clock::now() - start).count();
      if (timeout_seconds_ >= 0 && waited >= timeout_seconds_) {
        // What the server says it is doing (RingReader::Acquire's message
        // ends with it when the ring names one), e.g. indexing.
        const absl::string_view wait = batch.status().message();
        constexpr absl::string_view kSays = "; the server says: ";
        const size_t says = wait.find(kSays);
        Raise(absl::DeadlineExceededError(absl::StrFormat(
            "no batch from batchd (pid %u) within %.3g s: stream %s, rank %u%s",
            info_.server_pid, timeout_seconds_, stream_, info_.rank,
            says == absl::string_view::npos ? "" : wait.substr(says))));
      }
    }
  }

  py::dict Info() const {
    py::dict info;
    info["segment"] = info_.segment;
    info["server_pid"] = info_.server_pid;
    info["rank"] = info_.rank;
    info["world_size"] = info_.world_size;
    info["examples_per_epoch"] = info_.examples_per_epoch;
    info["steps_per_epoch"] = info_.steps_per_epoch;
    info["start_step"] = info_.start_step;
    info["slots"] = info_.slots;
    info["slot_bytes"] = info_.slot_bytes;
    return info;
  }

  // (address, bytes) of the ring's mapping, for cudaHostRegister.
  py::tuple Mapping() {
    std::lock_guard<std::mutex> lock(mu_);
    if (loader_ == nullptr) throw py::value_error("the loader is closed");
    return py::make_tuple(
        reinterpret_cast<uintptr_t>(loader_->mapped_address()),
        loader_->mapped_bytes());
  }

  double WaitSeconds() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    return loader_ == nullptr ? closed_wait_seconds_ : loader_->wait_seconds();
  }

  // Detaches from the ring now rather than when Python collects the Loader.
  // Tensors already handed out stay valid: they own their slots.
  void Close() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    if (loader_ == nullptr) return;
    closed_wait_seconds_ = loader_->wait_seconds();
    loader_.reset();
  }

 private:
  py::tuple ToPython(const Batch& batch, bool uint64_as_int64) const {
    py::list tensors;
    for (const Tensor& tensor : batch.tensors()) {
      tensors.append(py::make_tuple(
          tensor.name, SlotView(tensor, batch.lease(), uint64_as_int64)));
    }
    py::tuple cursor = py::make_tuple(
        batch.cursor_epoch(), batch.cursor_window(), batch.cursor_row());
    return py::make_tuple(
        tensors, py::make_tuple(batch.step(), batch.epoch(), batch.position(),
                                batch.valid_count(), cursor));
  }

  // Constant after construction.
  const std::string stream_;
  const double timeout_seconds_;  // the user's; < 0 waits for ever
  StreamInfo info_;

  std::mutex mu_;
  std::unique_ptr<Loader> loader_;  // guarded by mu_; null once closed
  double closed_wait_seconds_ = 0;  // guarded by mu_
};

LoaderOptions MakeOptions(std::string stream, uint64_t global_batch_size,
                          std::string workload, std::string data,
                          std::string split, py::object world_size,
                          py::object rank, uint64_t seed, uint64_t start_step,
                          py::object start_cursor, uint32_t slots,
                          py::object options, py::object server,
                          py::object timeout, double server_stale_seconds,
                          double connect_timeout) {
  LoaderOptions o;
  o.stream = std::move(stream);
  o.global_batch_size = global_batch_size;
  o.workload = std::move(workload);
  o.data = std::move(data);
  o.split = std::move(split);
  if (!world_size.is_none()) {
    o.world_size = world_size.cast<int>();
    if (o.world_size < 1) throw py::value_error("world_size must be >= 1");
  }
  if (!rank.is_none()) {
    o.rank = rank.cast<int>();
    if (o.rank < 0) throw py::value_error("rank must be >= 0");
  }
  o.seed = seed;
  o.start_step = start_step;
  if (!start_cursor.is_none()) {
    py::tuple c = py::tuple(start_cursor);
    if (c.size() != 3) {
      throw py::value_error("start_cursor is (epoch, window, row)");
    }
    o.has_start_cursor = true;
    for (int i = 0; i < 3; ++i) o.start_cursor[i] = c[i].cast<uint64_t>();
  }
  o.slots = slots;
  if (!options.is_none()) {
    // Workload options are strings on the wire; str() lets callers pass
    // numbers ({"examples": 1000}).
    for (auto item : py::dict(options)) {
      o.options[py::str(item.first)] = py::str(item.second);
    }
  }
  if (!server.is_none()) o.server = server.cast<std::string>();
  if (!timeout.is_none()) {
    o.timeout_seconds = timeout.cast<double>();
    if (!(o.timeout_seconds >= 0)) {
      throw py::value_error("timeout must be >= 0 seconds, or None");
    }
  }
  o.server_stale_seconds = server_stale_seconds;
  o.connect_timeout_seconds = connect_timeout;
  ApplyEnvironmentDefaults(&o);
  return o;
}

void DefineModule(py::module_& m) {
  m.doc() = "Binding of the batchd C++ client; use the package `batchd`.";

  py::handle runtime_error = PyExc_RuntimeError;
  errors.error = AddErrorType(
      m, "Error", runtime_error,
      "A batchd failure; `code` names the status code (e.g. 'INTERNAL').");
  py::handle base = errors.error;
  errors.unavailable = AddErrorType(
      m, "ServerUnavailableError",
      py::make_tuple(base, py::handle(PyExc_ConnectionError)),
      "The server stopped (the message names its pid) or cannot be reached.");
  errors.cancelled = AddErrorType(m, "StreamClosedError", base,
                                  "The stream was closed on the server.");
  errors.deadline_exceeded =
      AddErrorType(m, "DeadlineExceededError",
                   py::make_tuple(base, py::handle(PyExc_TimeoutError)),
                   "No batch (or no answer to OpenStream) within the timeout.");
  errors.invalid_argument = AddErrorType(
      m, "InvalidArgumentError",
      py::make_tuple(base, py::handle(PyExc_ValueError)),
      "The server refused the stream spec or the arguments; the message "
      "says which field.");

  m.attr("__version__") = kBatchdVersion;
  m.attr("PROTOCOL_VERSION") = kProtocolVersion;

  py::class_<SlotView>(m, "SlotView",
                       "One tensor of a batch: a share of its ring slot, "
                       "viewed through DLPack or numpy's array interface.")
      .def("__dlpack__", &SlotView::DLPack, py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(),
           py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__",
           [](const SlotView&) { return py::make_tuple(int(kDLCPU), 0); })
      .def_property_readonly("__array_interface__", &SlotView::ArrayInterface)
      .def_property_readonly("name", &SlotView::name)
      .def_property_readonly("dtype", &SlotView::dtype)
      .def_property_readonly("shape", &SlotView::shape);

  py::class_<PyLoader>(m, "Loader")
      .def(
          py::init([](std::string stream, uint64_t global_batch_size,
                      std::string workload, std::string data, std::string split,
                      py::object world_size, py::object rank, uint64_t seed,
                      uint64_t start_step, py::object start_cursor,
                      uint32_t slots, py::object options, py::object server,
                      py::object timeout, double server_stale_seconds,
                      double connect_timeout, py::object owner) {
            LoaderOptions o = MakeOptions(
                std::move(stream), global_batch_size, std::move(workload),
                std::move(data), std::move(split), std::move(world_size),
                std::move(rank), seed, start_step, std::move(start_cursor),
                slots, std::move(options), std::move(server),
                std::move(timeout), server_stale_seconds, connect_timeout);
            if (!owner.is_none()) {
              o.owner_uid = owner.cast<int64_t>();
              if (o.owner_uid < 0 || o.owner_uid > int64_t(UINT32_MAX)) {
                throw py::value_error("owner must be a uid (0..4294967295)");
              }
            }
            return std::make_unique<PyLoader>(o);
          }),
          py::arg("stream"), py::arg("global_batch_size"), py::kw_only(),
          py::arg("workload") = "synthetic", py::arg("data") = "",
          py::arg("split") = "train", py::arg("world_size") = py::none(),
          py::arg("rank") = py::none(), py::arg("seed") = 0,
          py::arg("start_step") = 0, py::arg("start_cursor") = py::none(),
          py::arg("slots") = 0, py::arg("options") = py::none(),
          py::arg("server") = py::none(), py::arg("timeout") = py::none(),
          py::arg("server_stale_seconds") = 3.0,
          py::arg("connect_timeout") = 30.0, py::arg("owner") = py::none())
      .def("_next", &PyLoader::Next, py::arg("uint64_as_int64") = true)
      .def("_info", &PyLoader::Info)
      .def("_mapping", &PyLoader::Mapping)
      .def_property_readonly("wait_seconds", &PyLoader::WaitSeconds,
                             "Seconds next() has spent waiting for data.")
      .def("close", &PyLoader::Close,
           "Detaches from the ring now; tensors handed out stay valid.");
}

}  // namespace
}  // namespace batchd

PYBIND11_MODULE(_batchd, m) { batchd::DefineModule(m); }
