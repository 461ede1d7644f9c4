/* The step context's common path in C: ``with collector.step():`` for a step with nothing to do but its two
 * timestamps and its record in the step ring.
 *
 * Why C: right after a training step the CPU's caches hold the step's data, and every Python frame, attribute and
 * integer object the step context touches then costs cache misses (bench/README.md, "Collector overhead"). Here
 * a common step is two clock reads and six 8-byte stores, with no Python frame and no object made.
 *
 * ``StepState`` is the base class of ``collector._StepContext``; ``collector._PyStepState`` is the same thing in
 * Python, used where this module was not built. Both hold the step state the collector reads and sets between
 * steps (attributes of the same names and meanings) and call back into Python for everything else:
 *   self._enter_full()                     a step with work, a nested step, or the fast path not armed
 *   self._exit_full(exc_type, exc, tb)     the same at the end, and a step that raised
 *   self._ring_gone(step, t0, t1)          the ring was let go of while armed (its memoryview released)
 *   self._decorate(fn)                     ``step(fn)``: ``@collector.step`` on a train-step function
 *
 * ``StepState.step`` is what ``collector.step`` is bound to where this module is built: with no argument it returns
 * the context itself, so ``with collector.step():`` runs no Python frame at all.
 *
 * The ring's layout is step_writer's: 8-byte words, the count of records in word 1, record i of the ring at
 * words [at, at + 5): step, start, end, ready, flags. The record is stored before the count (release order),
 * so that the writer process, which reads the count first, never reads a record not yet complete.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <time.h>

#define WRITTEN 1        /* step_writer.WRITTEN */
#define FIRST_WORD 6     /* step_writer.FIRST_WORD */
#define RECORD_WORDS 5   /* step_writer.RECORD_WORDS */
#define NO_STEP (-1)     /* ``current`` is None */

typedef struct {
    PyObject_HEAD
    int64_t depth;       /* steps open (nested steps count) */
    int64_t next_step;
    int64_t current;     /* the step running now, NO_STEP when none */
    int64_t t0;          /* its start (time.time_ns()) */
    int64_t fast_below;  /* steps below this take this path alone; -1: none */
    int64_t count;       /* records in the ring (its word 1) */
    int64_t at;          /* the next record's first word */
    int64_t ring_end;    /* one past the last record word */
    PyObject *words;     /* the ring as a memoryview of 8-byte words, or NULL */
    PyObject *collector;
} StepState;

static PyObject *str_enter_full, *str_exit_full;

static inline int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);     /* what time.time_ns() reads */
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The ring's words, or NULL where none is armed, it was released, or the record would not fit. */
static inline int64_t *
ring_for_record(StepState *self)
{
    if (self->words == NULL)
        return NULL;
    PyMemoryViewObject *mv = (PyMemoryViewObject *)self->words;
    if (mv->flags & _Py_MEMORYVIEW_RELEASED || mv->view.buf == NULL || mv->view.itemsize != 8)
        return NULL;
    Py_ssize_t n = mv->view.len / 8;
    if (self->at < FIRST_WORD || self->at + RECORD_WORDS > n || self->ring_end > n)
        return NULL;
    return (int64_t *)mv->view.buf;
}

static PyObject *
step_enter(StepState *self, PyObject *Py_UNUSED(ignored))
{
    int64_t step = self->next_step;
    if (self->depth || step >= self->fast_below) {
        PyObject *r = PyObject_CallMethodNoArgs((PyObject *)self, str_enter_full);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        return Py_NewRef(self);
    }
    self->t0 = now_ns();
    self->current = step;
    self->depth = 1;
    return Py_NewRef(self);
}

static PyObject *
step_exit(StepState *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs == 3 && args[0] == Py_None && self->depth == 1 && self->current != NO_STEP
            && self->current < self->fast_below) {
        int64_t step = self->current, t0 = self->t0;
        self->depth = 0;
        int64_t t1 = now_ns();
        int64_t *w = ring_for_record(self);
        self->next_step = step + 1;
        self->current = NO_STEP;
        if (w == NULL) {
            self->fast_below = -1;
            PyObject *r = PyObject_CallMethod((PyObject *)self, "_ring_gone", "LLL",
                                              (long long)step, (long long)t0, (long long)t1);
            if (r == NULL)
                return NULL;
            Py_DECREF(r);
            Py_RETURN_NONE;
        }
        int64_t *rec = w + self->at;
        rec[0] = step;
        rec[1] = t0;
        rec[2] = t1;
        rec[3] = t1;
        rec[4] = 0;
        self->count += 1;
#if defined(__GNUC__) || defined(__clang__)
        __atomic_store_n(&w[WRITTEN], self->count, __ATOMIC_RELEASE);
#else
        ((volatile int64_t *)w)[WRITTEN] = self->count;
#endif
        self->at += RECORD_WORDS;
        if (self->at >= self->ring_end)
            self->at = FIRST_WORD;
        Py_RETURN_NONE;
    }
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "__exit__ takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    return PyObject_CallMethodObjArgs((PyObject *)self, str_exit_full, args[0], args[1], args[2], NULL);
}

static PyObject *
step_call(StepState *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) == 0 && kwnames == NULL)
        return Py_NewRef(self);
    PyObject *decorate = PyObject_GetAttrString((PyObject *)self, "_decorate");
    if (decorate == NULL)
        return NULL;
    PyObject *r = PyObject_Vectorcall(decorate, args, nargsf, kwnames);
    Py_DECREF(decorate);
    return r;
}

/* ------------------------------------------------------------------ attributes */
static int
set_int64(PyObject *value, int64_t *out, int allow_none)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete a step-state attribute");
        return -1;
    }
    if (allow_none && value == Py_None) {
        *out = NO_STEP;
        return 0;
    }
    if (PyFloat_Check(value)) {             /* math.inf: no step is that far */
        double d = PyFloat_AS_DOUBLE(value);
        if (d >= 9.2e18) { *out = INT64_MAX; return 0; }
        if (d <= -9.2e18) { *out = INT64_MIN; return 0; }
        *out = (int64_t)d;
        return 0;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

#define INT_ATTR(name, field)                                                              \
    static PyObject *get_##name(StepState *self, void *c) { return PyLong_FromLongLong(self->field); } \
    static int set_##name(StepState *self, PyObject *v, void *c) { return set_int64(v, &self->field, 0); }

INT_ATTR(depth, depth)
INT_ATTR(next_step, next_step)
INT_ATTR(t0, t0)
INT_ATTR(count, count)
INT_ATTR(at, at)
INT_ATTR(ring_end, ring_end)

static PyObject *
get_current(StepState *self, void *c)
{
    if (self->current == NO_STEP)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(self->current);
}

static int
set_current(StepState *self, PyObject *v, void *c)
{
    return set_int64(v, &self->current, 1);
}

static PyObject *
get_fast_below(StepState *self, void *c)
{
    if (self->fast_below == INT64_MAX)
        return PyFloat_FromDouble(Py_HUGE_VAL);
    return PyLong_FromLongLong(self->fast_below);
}

static int
set_fast_below(StepState *self, PyObject *v, void *c)
{
    return set_int64(v, &self->fast_below, 0);
}

static PyObject *
get_words(StepState *self, void *c)
{
    return Py_NewRef(self->words ? self->words : Py_None);
}

static int
set_words(StepState *self, PyObject *v, void *c)
{
    if (v == NULL || v == Py_None) {
        Py_CLEAR(self->words);
        return 0;
    }
    if (!PyMemoryView_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "_words must be a memoryview of 8-byte words (step_writer.words) or None");
        return -1;
    }
    Py_buffer *view = PyMemoryView_GET_BUFFER(v);
    if (view->itemsize != 8 || view->format == NULL || strcmp(view->format, "q") != 0
            || !PyBuffer_IsContiguous(view, 'C') || view->readonly) {
        PyErr_SetString(PyExc_ValueError, "_words must be a writable, contiguous memoryview cast to 'q'");
        return -1;
    }
    Py_XSETREF(self->words, Py_NewRef(v));
    return 0;
}

static PyObject *
get_collector(StepState *self, void *c)
{
    return Py_NewRef(self->collector ? self->collector : Py_None);
}

static int
set_collector(StepState *self, PyObject *v, void *c)
{
    Py_XSETREF(self->collector, v == NULL || v == Py_None ? NULL : Py_NewRef(v));
    return 0;
}

static PyGetSetDef step_getset[] = {
    {"depth", (getter)get_depth, (setter)set_depth, "steps open (nested steps count)", NULL},
    {"next_step", (getter)get_next_step, (setter)set_next_step, "the step running or next", NULL},
    {"current", (getter)get_current, (setter)set_current, "the step running now, or None", NULL},
    {"t0", (getter)get_t0, (setter)set_t0, "the running step's start (time_ns)", NULL},
    {"fast_below", (getter)get_fast_below, (setter)set_fast_below,
     "steps below this are handled here alone; -1: none", NULL},
    {"_words", (getter)get_words, (setter)set_words, "the step ring's words while armed, else None", NULL},
    {"_count", (getter)get_count, (setter)set_count, "records in the ring (its word 1)", NULL},
    {"_at", (getter)get_at, (setter)set_at, "the next record's first word", NULL},
    {"_ring_end", (getter)get_ring_end, (setter)set_ring_end, "one past the ring's last record word", NULL},
    {"_c", (getter)get_collector, (setter)set_collector, "the collector", NULL},
    {NULL}
};

/* ------------------------------------------------------------------ type */
static PyObject *
step_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    StepState *self = (StepState *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->current = NO_STEP;
    self->fast_below = -1;
    self->at = FIRST_WORD;
    return (PyObject *)self;
}

static int
step_traverse(StepState *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->words);
    Py_VISIT(self->collector);
    return 0;
}

static int
step_clear(StepState *self)
{
    Py_CLEAR(self->words);
    Py_CLEAR(self->collector);
    return 0;
}

static void
step_dealloc(StepState *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    step_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef step_methods[] = {
    {"__enter__", (PyCFunction)step_enter, METH_NOARGS, "Start a step."},
    {"__exit__", (PyCFunction)(void (*)(void))step_exit, METH_FASTCALL, "End a step."},
    {"step", (PyCFunction)(void (*)(void))step_call, METH_FASTCALL | METH_KEYWORDS,
     "step($self, fn=None, /)\n--\n\n``with collector.step():`` (this context), or ``@collector.step`` on a function."},
    {NULL}
};

static PyType_Slot step_slots[] = {
    {Py_tp_doc, "The step state and ``collector.step()``'s context; subclassed by collector._StepContext."},
    {Py_tp_new, step_new},
    {Py_tp_dealloc, step_dealloc},
    {Py_tp_traverse, step_traverse},
    {Py_tp_clear, step_clear},
    {Py_tp_methods, step_methods},
    {Py_tp_getset, step_getset},
    {0, NULL}
};

static PyType_Spec step_spec = {
    .name = "workbench.collectors._fast_step.StepState",
    .basicsize = sizeof(StepState),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = step_slots,
};

static int
module_exec(PyObject *m)
{
    str_enter_full = PyUnicode_InternFromString("_enter_full");
    str_exit_full = PyUnicode_InternFromString("_exit_full");
    if (!str_enter_full || !str_exit_full)
        return -1;
    PyObject *type = PyType_FromModuleAndSpec(m, &step_spec, NULL);
    if (type == NULL)
        return -1;
    if (PyModule_AddObject(m, "StepState", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    if (PyModule_AddIntConstant(m, "WRITTEN", WRITTEN) < 0
            || PyModule_AddIntConstant(m, "FIRST_WORD", FIRST_WORD) < 0
            || PyModule_AddIntConstant(m, "RECORD_WORDS", RECORD_WORDS) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "workbench.collectors._fast_step",
    .m_doc = "The step context's common path in C (see collector._StepContext).",
    .m_size = 0,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__fast_step(void)
{
    return PyModuleDef_Init(&module_def);
}
