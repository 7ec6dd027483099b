// The Python module `selfckpt`: the C API for mpi4py and numpy programs. A region is a numpy array
// whose memory is the workspace itself, so a checkpoint or a recovery never copies it; errors are
// `selfckpt.Error` with the C library's message, its code and the exit code skt-run expects.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <selfckpt/selfckpt.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// The class of selfckpt.Error, created at import.
PyObject* error_type = nullptr;

// Raises selfckpt.Error for a failed call: message, code (SKT_ERR_*), name and exit_code.
[[noreturn]] void raise_error(int code, const std::string& message) {
  py::object error = py::reinterpret_borrow<py::object>(error_type)(message);
  error.attr("code") = code;
  error.attr("name") = skt_strerror(code);
  error.attr("exit_code") = skt_exit_code(code);
  PyErr_SetObject(error_type, error.ptr());
  throw py::error_already_set();
}

void check(int code) {
  if (code != SKT_OK) raise_error(code, skt_last_error());
}

// An mpi4py communicator (anything with py2f(), the Fortran handle), or COMM_WORLD for None.
// mpi4py initialises MPI at its import and finalises it at exit, after the program's own code.
MPI_Comm communicator_of(const py::object& comm) {
  py::module_::import("mpi4py.MPI");
  if (comm.is_none()) return MPI_COMM_WORLD;
  if (!py::hasattr(comm, "py2f")) {
    raise_error(SKT_ERR_ARG, "comm must be an mpi4py communicator (or None for COMM_WORLD)");
  }
  return MPI_Comm_f2c(comm.attr("py2f")().cast<MPI_Fint>());
}

// As numpy.zeros takes it: a sequence of extents, or one integer for a 1-D array.
std::vector<py::ssize_t> shape_of(const std::string& name, const py::object& shape) {
  try {
    if (py::isinstance<py::int_>(shape)) return {shape.cast<py::ssize_t>()};
    return shape.cast<std::vector<py::ssize_t>>();
  } catch (const py::cast_error&) {
    throw py::type_error("array '" + name + "': the shape must be an integer or a sequence of " +
                         "integers, not " + py::str(shape).cast<std::string>());
  }
}

class Context {
 public:
  Context(const py::object& comm, const std::optional<std::string>& config) {
    check(skt_init(communicator_of(comm), config ? config->c_str() : nullptr, &ctx_));
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // A workspace region as a C-ordered numpy array; it refers to this context, which therefore
  // lives as long as the array. Its contents are unspecified until recover() says what they are.
  static py::array array(const py::object& self, const std::string& name,
                         const py::object& shape_or_length, const py::object& dtype) {
    auto& context = self.cast<Context&>();
    const auto shape = shape_of(name, shape_or_length);
    const py::dtype type = py::dtype::from_args(dtype);
    std::size_t bytes = static_cast<std::size_t>(type.itemsize());
    for (const auto extent : shape) {
      if (extent < 0) raise_error(SKT_ERR_ARG, "array '" + name + "': a negative extent");
      if (extent != 0 && bytes > SIZE_MAX / static_cast<std::size_t>(extent)) {
        raise_error(SKT_ERR_ARG, "array '" + name + "': its size overflows");
      }
      bytes *= static_cast<std::size_t>(extent);
    }
    void* memory = nullptr;
    check(skt_alloc(context.open(), name.c_str(), bytes, &memory));
    return py::array(type, shape, memory, self);
  }

  // Small private state (a step counter, a residual): a writable C-contiguous array, kept
  // referenced here so that its memory lives as long as the context.
  void protect(const std::string& name, py::array array) {
    if (!(array.flags() & py::array::c_style) || !array.writeable()) {
      raise_error(SKT_ERR_ARG, "protect '" + name +
                                   "': the array must be C-contiguous and writable "
                                   "(numpy.ascontiguousarray, or an array of its own)");
    }
    check(skt_protect(open(), name.c_str(), array.mutable_data(),
                      static_cast<std::size_t>(array.nbytes())));
    protected_.push_back(array);
  }

  // The restored epoch, 0 on a fresh start.
  std::uint64_t recover() {
    std::uint64_t epoch = 0;
    check(skt_recover(open(), &epoch));
    return epoch;
  }

  void checkpoint() { check(skt_checkpoint(open())); }

  bool need_checkpoint() {
    int need = 0;
    check(skt_need_checkpoint(open(), &need));
    return need != 0;
  }

  void mark_static(const py::array& array) { check(skt_mark_static(open(), array.data())); }

  // Where this rank's last recover() spent its time (skt_recovery), as a dict.
  py::dict recovery() {
    skt_recovery r{};
    check(skt_get_recovery(open(), &r));
    py::dict out;
    out["seconds"] = r.seconds;
    out["attach"] = r.attach;
    out["join"] = r.join;
    out["verify"] = r.verify;
    out["fetch"] = r.fetch;
    out["decode"] = r.decode;
    out["restore"] = r.restore;
    out["agree"] = r.agree;
    out["verified_bytes"] = r.verified_bytes;
    out["rebuilt_bytes"] = r.rebuilt_bytes;
    out["restored_bytes"] = r.restored_bytes;
    out["lost"] = r.lost != 0;
    return out;
  }

  // After it the arrays' memory is detached: they must not be used any more.
  void finalize(bool discard) {
    skt_context* ctx = open();
    ctx_ = nullptr;
    protected_.clear();
    check(skt_finalize(ctx, discard ? 1 : 0));
  }

 private:
  skt_context* open() {
    if (ctx_ == nullptr) raise_error(SKT_ERR_STATE, "the context was finalized");
    return ctx_;
  }

  skt_context* ctx_ = nullptr;
  std::vector<py::array> protected_;
};

// The context of selfckpt.init(), which the module's own functions use (as skt_malloc uses the
// default context in C): a program with one context needs no object to pass around. A plain
// reference, not a py::object, so that nothing is released after the interpreter has ended.
PyObject* default_context = nullptr;

Context& default_one() {
  if (default_context == nullptr) raise_error(SKT_ERR_STATE, "call selfckpt.init() first");
  return py::handle(default_context).cast<Context&>();
}

// The last committed epoch of another job, of any number of ranks (skt_epoch_open): how a
// program restarts on another number of ranks.
class Epoch {
 public:
  Epoch(const std::string& job, const py::object& comm) {
    check(skt_epoch_open(communicator_of(comm), job.c_str(), &epoch_));
  }
  ~Epoch() { skt_epoch_close(epoch_); }
  Epoch(const Epoch&) = delete;
  Epoch& operator=(const Epoch&) = delete;

  std::uint64_t number() {
    std::uint64_t n = 0;
    check(skt_epoch_number(open(), &n));
    return n;
  }
  int ranks() {
    int n = 0;
    check(skt_epoch_ranks(open(), &n));
    return n;
  }
  int in_memory() {
    int n = 0;
    check(skt_epoch_in_memory(open(), &n));
    return n;
  }
  std::size_t region_bytes(int old_rank, const std::string& name) {
    std::size_t bytes = 0;
    check(skt_epoch_region_bytes(open(), old_rank, name.c_str(), &bytes));
    return bytes;
  }
  // Collective: each piece (old_rank, name, offset, array) fills the array (C-contiguous, writable)
  // with its bytes from `offset` of the old rank's region or private object.
  void read(const std::vector<std::tuple<int, std::string, std::size_t, py::array>>& pieces) {
    std::vector<skt_epoch_piece> list;
    for (const auto& [old_rank, name, offset, array] : pieces) {
      if (!(array.flags() & py::array::c_style) || !array.writeable()) {
        raise_error(SKT_ERR_ARG, "read '" + name +
                                     "': the array must be C-contiguous and writable (a row of "
                                     "a C-ordered array is)");
      }
      list.push_back({old_rank, name.c_str(), offset, static_cast<std::size_t>(array.nbytes()),
                      const_cast<void*>(array.data())});
    }
    check(skt_epoch_read(open(), list.data(), list.size()));
  }
  void close() { check(skt_epoch_close(std::exchange(epoch_, nullptr))); }

 private:
  skt_epoch* open() const {
    if (epoch_ == nullptr) raise_error(SKT_ERR_STATE, "this epoch was closed");
    return epoch_;
  }
  skt_epoch* epoch_ = nullptr;
};

}  // namespace

PYBIND11_MODULE(selfckpt, m) {
  m.doc() =
      "selfckpt: in-memory self-checkpointing for mpi4py programs. Arrays made by "
      "Context.array live in the workspace; checkpoint() commits them, recover() brings them "
      "back after a failure. See docs/python.md.";
  error_type = PyErr_NewExceptionWithDoc(
      "selfckpt.Error",
      "A failed selfckpt call: the library's message; code (SKT_ERR_*, negative), name, and "
      "exit_code (what skt-run expects the process to exit with).",
      PyExc_RuntimeError, nullptr);
  m.add_object("Error", py::handle(error_type));
  for (const auto& [name, code] : {std::pair{"OK", SKT_OK},
                                   {"ERR_ARG", SKT_ERR_ARG},
                                   {"ERR_CONFIG", SKT_ERR_CONFIG},
                                   {"ERR_SHM", SKT_ERR_SHM},
                                   {"ERR_MPI", SKT_ERR_MPI},
                                   {"ERR_UNRECOVERABLE", SKT_ERR_UNRECOVERABLE},
                                   {"ERR_MISMATCH", SKT_ERR_MISMATCH},
                                   {"ERR_STATE", SKT_ERR_STATE},
                                   {"ERR_NOMEM", SKT_ERR_NOMEM},
                                   {"ERR_STALE", SKT_ERR_STALE},
                                   {"ERR_INTERNAL", SKT_ERR_INTERNAL},
                                   {"ERR_BUSY", SKT_ERR_BUSY}}) {
    m.attr(name) = static_cast<int>(code);
  }

  py::class_<Context>(m, "Context",
                      "Collective over comm (an mpi4py communicator; None: COMM_WORLD). config: a "
                      "TOML file, else SKT_CONFIG and the SKT_* variables, as in C.")
      .def(py::init<const py::object&, const std::optional<std::string>&>(),
           py::arg("comm") = py::none(), py::arg("config") = py::none())
      .def("array", &Context::array, py::arg("name"), py::arg("shape"),
           py::arg("dtype") = py::str("float64"),
           "A workspace region as a numpy array (C order), declared in the same order and sizes "
           "on every launch; no copy is ever made of it.")
      .def("protect", &Context::protect, py::arg("name"), py::arg("array"),
           "Checkpoint this small array (C-contiguous, writable) with the workspace.")
      .def("recover", &Context::recover,
           "Collective, once, after every region is declared: the restored epoch (its data is "
           "back in the arrays), or 0 on a fresh start.")
      .def("checkpoint", &Context::checkpoint, "Collective: commit the arrays as the next epoch.")
      .def("need_checkpoint", &Context::need_checkpoint,
           "Collective: whether Daly's interval (SKT_MTBF) has passed since the last checkpoint.")
      .def("mark_static", &Context::mark_static, py::arg("array"),
           "The region of this array does not change any more (from the next checkpoint on).")
      .def("recovery", &Context::recovery, "This rank's last recover(), phase by phase.")
      .def("finalize", &Context::finalize, py::arg("discard") = true,
           "Collective: discard=True removes the job's segments (the run is complete), False "
           "keeps them for a relaunch. The arrays must not be used after it.");
  py::class_<Epoch>(m, "Epoch",
                    "Collective over comm: the last committed epoch of job `job`, whatever number "
                    "of ranks wrote it, from memory or its drained files (skt_epoch_open). A "
                    "context manager; read() is collective.")
      .def(py::init<const std::string&, const py::object&>(), py::arg("job"),
           py::arg("comm") = py::none())
      .def_property_readonly("number", &Epoch::number, "The epoch's number.")
      .def_property_readonly("ranks", &Epoch::ranks, "How many ranks wrote it.")
      .def_property_readonly("in_memory", &Epoch::in_memory,
                             "How many of them are read from memory (the rest from files).")
      .def("region_bytes", &Epoch::region_bytes, py::arg("old_rank"), py::arg("name"))
      .def("read", &Epoch::read, py::arg("pieces"),
           "Collective: each (old_rank, name, offset, array) fills the array from there.")
      .def("close", &Epoch::close)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Epoch& e, const py::args&) { e.close(); });
  m.def(
      "init",
      [](const py::object& comm, const std::optional<std::string>& config) {
        if (default_context != nullptr) {
          raise_error(SKT_ERR_STATE, "selfckpt.init() was called already");
        }
        py::object context =
            py::cast(new Context(comm, config), py::return_value_policy::take_ownership);
        default_context = context.inc_ref().ptr();
        return context;
      },
      py::arg("comm") = py::none(), py::arg("config") = py::none(),
      "Context(comm, config), kept as the one the module's functions use.");
  m.def(
      "array",
      [](const std::string& name, const py::object& shape, const py::object& dtype) {
        default_one();
        return Context::array(py::reinterpret_borrow<py::object>(default_context), name, shape,
                              dtype);
      },
      py::arg("name"), py::arg("shape"), py::arg("dtype") = py::str("float64"));
  m.def(
      "protect",
      [](const std::string& name, const py::array& array) { default_one().protect(name, array); },
      py::arg("name"), py::arg("array"));
  m.def("recover", [] { return default_one().recover(); });
  m.def("checkpoint", [] { default_one().checkpoint(); });
  m.def("need_checkpoint", [] { return default_one().need_checkpoint(); });
  m.def("mark_static", [](const py::array& array) { default_one().mark_static(array); });
  m.def("recovery", [] { return default_one().recovery(); });
  m.def(
      "finalize",
      [](bool discard) {
        Context& context = default_one();
        const auto keep = py::reinterpret_steal<py::object>(default_context);
        default_context = nullptr;
        context.finalize(discard);
      },
      py::arg("discard") = true);
  m.def("exit_code", &skt_exit_code, py::arg("code"),
        "The process exit code skt-run expects for an error code.");
}
