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

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "batchd/loader.h"
#include "batchd/version.h"

namespace py = pybind11;

namespace batchd {
namespace {

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

// The GIL released while C++ waits. Reacquire() takes it back in ordinary
// code, never in a destructor (as pybind11's gil_scoped_release does): a
// thread that takes the GIL while the interpreter exits, such as a daemon
// thread in next() when the program ends, is ended by CPython with
// pthread_exit, and that unwinding calls std::terminate ("terminate called
// without an active exception") when it begins in a destructor.
class GilReleased {
 public:
  GilReleased() : state_(PyEval_SaveThread()) {}
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

  // At exit, CPython may end this thread here.
  void Reacquire() {
    PyThreadState* const state = state_;
    state_ = nullptr;
    PyEval_RestoreThread(state);
  }

  // Left without Reacquire() only by unwinding: a C++ exception, which
  // pybind11 raises in Python with the GIL, or the end of a thread whose
  // interrupt check took the GIL at exit, which must not touch Python.
  ~GilReleased() {
    if (state_ != nullptr && std::uncaught_exceptions() > 0) {
      PyEval_RestoreThread(state_);
    }
  }

 private:
  PyThreadState* state_;
};

// The C++ Loader and what Python asks of it. Waits happen in C++ without
// the GIL; every ~100 ms the Loader's interrupt check takes the GIL to run
// Python's signal handlers, so that Ctrl-C stops a trainer blocked on data.
//
// Fork: a child's copy of a PyLoader never touches the parent's ring (the
// C++ Loader sees to that) and never takes mu_, which a parent's thread may
// have held when the process forked.
class PyLoader {
 public:
  explicit PyLoader(LoaderOptions options) : stream_(options.stream) {
    absl::StatusOr<std::unique_ptr<Loader>> loader;
    {
      GilReleased gil;
      loader = Loader::Open(options);
      gil.Reacquire();
    }
    if (!loader.ok()) Raise(loader.status());
    loader_ = *std::move(loader);
    loader_->SetInterruptCheck([] {
      py::gil_scoped_acquire gil;
      // A handler that raised (KeyboardInterrupt) leaves its exception set
      // for Next to throw.
      return PyErr_CheckSignals() == 0;
    });
  }

  ~PyLoader() {
    if (getpid() != owner_pid_) (void)loader_.release();
  }

  // Returns ([(name, SlotView), ...], (step, epoch, position, valid_count,
  // (cursor epoch, window, row, step), epoch_steps, last_in_epoch)).
  // Raises StopIteration at the end of an eval stream, and with
  // `in_epoch` (Loader::NextInEpoch) at the end of the epoch in progress.
  // `uint64_as_int64` is for torch (see ToDLDataType).
  // In a forked child mu_ may be held by a thread the child does not have:
  // there it is not taken (the analysis cannot follow a lock taken only in
  // one process).
  py::tuple Next(bool uint64_as_int64,
                 bool in_epoch) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    absl::StatusOr<Batch> batch;
    {
      GilReleased gil;
      const bool owner = getpid() == owner_pid_;
      if (owner) mu_.Lock();
      if (loader_ == nullptr) {
        batch = absl::FailedPreconditionError("the Loader is closed");
      } else {
        batch = in_epoch ? loader_->NextInEpoch() : loader_->Next();
      }
      if (owner) mu_.Unlock();
      gil.Reacquire();
    }
    if (PyErr_Occurred() != nullptr) throw py::error_already_set();
    if (batch.ok()) return ToPython(*batch, uint64_as_int64);
    if (absl::IsOutOfRange(batch.status())) throw py::stop_iteration();
    Raise(batch.status());
  }

  // The JSON text of the C++ LoaderState (the package turns it into the
  // dict state_dict() returns).
  std::string StateJson() {
    absl::MutexLock lock(&mu_);
    if (loader_ == nullptr) throw py::value_error("the loader is closed");
    return loader_->State().ToJson();
  }

  // Loader::EpochSteps, or TypeError saying why it is not known (what
  // len() raises for a length it cannot give).
  uint64_t EpochSteps() {
    absl::MutexLock lock(&mu_);
    if (loader_ == nullptr) throw py::value_error("the loader is closed");
    absl::StatusOr<uint64_t> steps = loader_->EpochSteps();
    if (!steps.ok())
      throw py::type_error(std::string(steps.status().message()));
    return *steps;
  }

  void LoadState(const std::string& json) {
    absl::StatusOr<LoaderState> state = LoaderState::FromJson(json);
    if (!state.ok()) Raise(state.status());
    absl::Status s;
    {
      GilReleased gil;
      {
        absl::MutexLock lock(&mu_);
        s = loader_ == nullptr
                ? absl::FailedPreconditionError("the Loader is closed")
                : loader_->LoadState(*state);
      }
      gil.Reacquire();
    }
    if (!s.ok()) Raise(s);
  }

  py::dict Info() {
    absl::MutexLock lock(&mu_);
    if (loader_ == nullptr) throw py::value_error("the loader is closed");
    const StreamInfo& i = loader_->info();
    py::dict info;
    info["segment"] = i.segment;
    info["server_pid"] = i.server_pid;
    info["rank"] = i.rank;
    info["world_size"] = i.world_size;
    info["examples_per_epoch"] = i.examples_per_epoch;
    info["steps_per_epoch"] = i.steps_per_epoch;
    info["start_step"] = i.start_step;
    info["slots"] = i.slots;
    info["slot_bytes"] = i.slot_bytes;
    info["cursor_resume"] = i.cursor_resume;
    return info;
  }

  // (address, bytes) of the ring's mapping: what _register_pinned pins.
  py::tuple Mapping() {
    absl::MutexLock lock(&mu_);
    if (loader_ == nullptr) throw py::value_error("the loader is closed");
    return py::make_tuple(
        reinterpret_cast<uintptr_t>(loader_->mapped_address()),
        loader_->mapped_bytes());
  }

  // Loader::RegisterPinned / UnregisterPinned, the one implementation of
  // pinning the ring (batchd.algoperf calls these): whether it worked
  // (False where there is no CUDA runtime, driver or device).
  bool RegisterPinned() { return PinCall(&Loader::RegisterPinned); }
  bool UnregisterPinned() { return PinCall(&Loader::UnregisterPinned); }

  double WaitSeconds() {
    GilReleased gil;
    double seconds;
    {
      absl::MutexLock lock(&mu_);
      seconds =
          loader_ == nullptr ? closed_wait_seconds_ : loader_->wait_seconds();
    }
    gil.Reacquire();
    return seconds;
  }

  // (times reopened on a restarted daemon, seconds spent reopening).
  py::tuple Reconnects() {
    absl::MutexLock lock(&mu_);
    if (loader_ == nullptr) return py::make_tuple(0, 0.0);
    return py::make_tuple(loader_->reconnects(), loader_->reconnect_seconds());
  }

  // Detaches from the ring now rather than when Python collects the Loader.
  // Tensors already handed out stay valid: they own their slots.
  void Close() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // the child: as Next
    if (getpid() != owner_pid_) {
      (void)loader_.release();  // the parent's; see the class comment
      return;
    }
    GilReleased gil;
    {
      absl::MutexLock lock(&mu_);
      if (loader_ != nullptr) {
        closed_wait_seconds_ = loader_->wait_seconds();
        loader_.reset();
      }
    }
    gil.Reacquire();
  }

 private:
  // (loader_->*call)() without the GIL: whether it worked (false once
  // closed).
  bool PinCall(absl::Status (Loader::*call)()) {
    GilReleased gil;
    bool ok;
    {
      absl::MutexLock lock(&mu_);
      ok = loader_ != nullptr && (loader_.get()->*call)().ok();
    }
    gil.Reacquire();
    return ok;
  }

  py::tuple ToPython(const Batch& batch, bool uint64_as_int64) const {
    py::list tensors;
    for (const Tensor& tensor : batch.tensors()) {
      tensors.append(py::make_tuple(
          tensor.name, SlotView(tensor, batch.lease(), uint64_as_int64)));
    }
    py::tuple cursor =
        py::make_tuple(batch.cursor_epoch(), batch.cursor_window(),
                       batch.cursor_row(), batch.step());
    return py::make_tuple(
        tensors, py::make_tuple(batch.step(), batch.epoch(), batch.position(),
                                batch.valid_count(), cursor,
                                batch.epoch_steps(), batch.last_in_epoch()));
  }

  // Constant after construction.
  const std::string stream_;
  const pid_t owner_pid_ = getpid();

  absl::Mutex mu_;
  std::unique_ptr<Loader> loader_ ABSL_GUARDED_BY(mu_);  // null once closed
  double closed_wait_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

// Seconds from a Python number or None (-1: no bound).
double SecondsOrNone(py::object value, const char* name) {
  if (value.is_none()) return -1;
  const double v = value.cast<double>();
  if (!(v >= 0)) {
    throw py::value_error(std::string(name) + " must be >= 0 seconds, or None");
  }
  return v;
}

LoaderOptions MakeOptions(py::dict kw) {
  LoaderOptions o;
  auto take = [&](const char* key) -> py::object {
    return kw.contains(key) ? py::object(kw[key]) : py::object(py::none());
  };
  o.stream = kw["stream"].cast<std::string>();
  o.global_batch_size = kw["global_batch_size"].cast<uint64_t>();
  o.workload = kw["workload"].cast<std::string>();
  o.data = kw["data"].cast<std::string>();
  o.split = kw["split"].cast<std::string>();
  if (py::object v = take("world_size"); !v.is_none()) {
    o.world_size = v.cast<int>();
    if (o.world_size < 1) throw py::value_error("world_size must be >= 1");
  }
  if (py::object v = take("rank"); !v.is_none()) {
    o.rank = v.cast<int>();
    if (o.rank < 0) throw py::value_error("rank must be >= 0");
  }
  o.seed = kw["seed"].cast<uint64_t>();
  o.start_step = kw["start_step"].cast<uint64_t>();
  if (py::object v = take("start_cursor"); !v.is_none()) {
    py::tuple c = py::tuple(v);
    if (c.size() != 3 && c.size() != 4) {
      throw py::value_error(
          "start_cursor is a batch's cursor, (epoch, window, row, step) as "
          "last_batch_info.cursor gives it, or (epoch, window, row) of rank "
          "0's batch at start_step");
    }
    o.has_start_cursor = true;
    for (int i = 0; i < 3; ++i) o.start_cursor[i] = c[i].cast<uint64_t>();
    if (c.size() == 4) {
      o.has_start_cursor_step = true;
      o.start_cursor_step = c[3].cast<uint64_t>();
    }
  }
  if (py::object v = take("state"); !v.is_none()) {
    absl::StatusOr<LoaderState> state =
        LoaderState::FromJson(v.cast<std::string>());
    if (!state.ok()) Raise(state.status());
    o.state = *std::move(state);
  }
  o.slots = kw["slots"].cast<uint32_t>();
  if (py::object v = take("options"); !v.is_none()) {
    // Workload options are strings on the wire; str() lets callers pass
    // numbers ({"examples": 1000}).
    for (auto item : py::dict(v)) {
      o.options[py::str(item.first)] = py::str(item.second);
    }
  }
  if (py::object v = take("server"); !v.is_none()) {
    o.server = v.cast<std::string>();
  }
  if (py::object v = take("server_uid"); !v.is_none()) {
    o.server_uid = v.cast<int64_t>();
    if (o.server_uid < 0) throw py::value_error("server_uid must be >= 0");
  }
  o.timeout_seconds = SecondsOrNone(take("timeout"), "timeout");
  o.stall_timeout_seconds = SecondsOrNone(take("stall_timeout"), "stall_timeout");
  o.reconnect_seconds = SecondsOrNone(take("reconnect"), "reconnect");
  if (o.reconnect_seconds < 0) o.reconnect_seconds = 0;
  o.server_stale_seconds = kw["server_stale_seconds"].cast<double>();
  o.connect_timeout_seconds = kw["connect_timeout"].cast<double>();
  if (py::object v = take("owner"); !v.is_none()) {
    o.owner_uid = v.cast<int64_t>();
    if (o.owner_uid < 0 || o.owner_uid > int64_t(UINT32_MAX)) {
      throw py::value_error("owner must be a uid (0..4294967295)");
    }
  }
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

  m.def(
      "_default_world_size",
      [] {
        LoaderOptions o;
        ApplyEnvironmentDefaults(&o);
        return o.world_size;
      },
      "The world size a Loader opened without one takes ($WORLD_SIZE, "
      "else 1).");

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

  // The keyword arguments and their defaults are the package's (Loader in
  // batchd/__init__.py, which documents them); it passes them all.
  py::class_<PyLoader>(m, "Loader")
      .def(py::init([](py::kwargs kw) {
        return std::make_unique<PyLoader>(MakeOptions(kw));
      }))
      .def("_next", &PyLoader::Next, py::arg("uint64_as_int64") = true,
           py::arg("in_epoch") = false)
      .def("_epoch_steps", &PyLoader::EpochSteps)
      .def("_info", &PyLoader::Info)
      .def("_mapping", &PyLoader::Mapping)
      .def("_register_pinned", &PyLoader::RegisterPinned)
      .def("_unregister_pinned", &PyLoader::UnregisterPinned)
      .def("_state_json", &PyLoader::StateJson)
      .def("_load_state_json", &PyLoader::LoadState)
      .def("_reconnects", &PyLoader::Reconnects)
      .def_property_readonly("wait_seconds", &PyLoader::WaitSeconds,
                             "Seconds next() has spent waiting for data.")
      .def("close", &PyLoader::Close,
           "Detaches from the ring now; tensors handed out stay valid.");
}

}  // namespace
}  // namespace batchd

PYBIND11_MODULE(_batchd, m) { batchd::DefineModule(m); }
