// bind_record.h — private to the binding floor: a C result struct bound as a read-only record.
// Each field is a property converted when read; a record compares, hashes and prints by its
// fields, and as_dict() gives them in order (the CLI's --json). Used by the pool's records
// (bind_pool_records.cpp) and the waiter's (bind_waiter.cpp).
#pragma once
#include <nanobind/stl/string.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "bind/bind.h"

namespace cxk::py {

template <class R> struct Field {
    const char *name;
    nb::object (*get)(const R &);
    void (*set)(R &, nb::handle);  // nullptr: the keyword constructor refuses the field
};

// One bound record type: its fields in order (what __repr__, __eq__, __hash__ and as_dict
// walk), each a read-only property.
template <class R> class Record {
  public:
    Record(nb::module_ &m, const char *name, const char *doc) : cls_(m, name, doc) {
        name_() = name;
    }
    Record &field(const char *name, nb::object (*get)(const R &)) {
        return add({name, get, nullptr});
    }
    // a struct member, as the Python int it holds
    template <auto M> Record &member(const char *name) {
        return add({name, &get_member<M>, &set_member<M>});
    }
    // a member of a struct member (r.*Outer).*Inner, as the Python int it holds
    template <auto Outer, auto Inner> Record &member(const char *name) {
        return add({name, &get_inner<Outer, Inner>, nullptr});
    }
    nb::class_<R> &cls() { return cls_; }
    Record &finish();
    // R(**fields): every field a member; the ones not given are 0
    Record &keyword_init();
    // rec["field"] reads a field with a DeprecationWarning (records that replaced dicts keep
    // their old callers working for one release); KeyError naming the record for others
    Record &deprecated_mapping();
    // pickling as the struct's bytes (a plain C struct only): a record crosses a process
    // boundary (a queue, a pipe) between processes of one cxlkit build
    Record &pickle_bytes();

  private:
    static std::vector<Field<R>> &fields() {
        static std::vector<Field<R>> f;
        return f;
    }
    static const char *&name_() {
        static const char *n = "";
        return n;
    }
    template <auto M> static nb::object get_member(const R &r) { return nb::cast(r.*M); }
    template <auto O, auto I> static nb::object get_inner(const R &r) {
        return nb::cast((r.*O).*I);
    }
    template <auto M> static void set_member(R &r, nb::handle v) {
        using T = std::remove_reference_t<decltype(r.*M)>;
        if (!nb::try_cast<T>(v, r.*M))
            throw nb::type_error((std::string(name_()) + " field: " +
                                  nb::cast<std::string>(nb::repr(v)) +
                                  " is not an int of its range").c_str());
    }
    Record &add(Field<R> f) {
        fields().push_back(f);
        cls_.def_prop_ro(f.name, f.get);
        return *this;
    }
    static std::string names() {
        std::string s;
        for (const Field<R> &f : fields()) s += (s.empty() ? "" : ", ") + std::string(f.name);
        return s;
    }
    static const Field<R> *find(const std::string &key) {
        for (const Field<R> &f : fields())
            if (key == f.name) return &f;
        return nullptr;
    }
    // the record's JSON form: the one place a record becomes a dict
    static nb::dict as_dict(const R &r) {
        nb::dict d;
        for (const Field<R> &f : fields()) d[f.name] = f.get(r);
        return d;
    }
    static nb::object eq(const R &a, nb::handle b) {
        if (!nb::isinstance<R>(b)) return nb::borrow(Py_NotImplemented);
        const R &o = nb::cast<const R &>(b);
        for (const Field<R> &f : fields())
            if (!f.get(a).equal(f.get(o))) return nb::bool_(false);
        return nb::bool_(true);
    }
    static Py_ssize_t hash(const R &r) {
        nb::list values;
        for (const Field<R> &f : fields()) values.append(f.get(r));
        return nb::hash(nb::tuple(values));
    }
    static std::string repr(const R &r) {
        std::string s = std::string(name_()) + "(";
        for (const Field<R> &f : fields()) {
            if (&f != &fields().front()) s += ", ";
            s += std::string(f.name) + "=" + nb::cast<std::string>(nb::repr(f.get(r)));
        }
        return s + ")";
    }
    static void init(R *self, const nb::kwargs &kw) {
        R r{};
        for (auto [k, v] : kw) {
            const std::string key = nb::cast<std::string>(k);
            const Field<R> *f = find(key);
            if (!f || !f->set)
                throw nb::type_error((std::string(name_()) + "(): no field " + key).c_str());
            f->set(r, v);
        }
        new (self) R(r);
    }
    static nb::object item(const R &r, const std::string &key);
    static nb::bytes getstate(const R &r) { return nb::bytes(&r, sizeof r); }
    static void setstate(R &self, nb::bytes state);

    nb::class_<R> cls_;
};

template <class R> Record<R> &Record<R>::finish() {
    nb::list names;
    for (const Field<R> &f : fields()) names.append(f.name);
    cls_.attr("_fields") = nb::tuple(names);
    cls_.def("as_dict", &as_dict, "the fields as a dict, in order (JSON-ready)")
        .def("__eq__", &eq)
        .def("__hash__", &hash)
        .def("__repr__", &repr);
    return *this;
}

template <class R> Record<R> &Record<R>::keyword_init() {
    cls_.def("__init__", &init);
    return *this;
}

template <class R> nb::object Record<R>::item(const R &r, const std::string &key) {
    const Field<R> *f = find(key);
    if (!f)
        throw nb::key_error((std::string(name_()) + " has no field " + key + ": its fields "
                             "are " + names()).c_str());
    const std::string msg = std::string(name_()) + "[\"" + key + "\"]: mapping access is "
                            "deprecated and goes in the next release; read the attribute (." +
                            key + ")";
    if (PyErr_WarnEx(PyExc_DeprecationWarning, msg.c_str(), 1) != 0) throw nb::python_error();
    return f->get(r);
}

template <class R> Record<R> &Record<R>::deprecated_mapping() {
    cls_.def("__getitem__", &item, nb::arg("field"),
             "deprecated: the field's value (read the attribute instead)");
    return *this;
}

template <class R> void Record<R>::setstate(R &self, nb::bytes state) {
    if (state.size() != sizeof(R))
        throw nb::value_error((std::string(name_()) + " state: " +
                               std::to_string(state.size()) + " bytes, this build's record "
                               "is " + std::to_string(sizeof(R)) + "; unpickle it with the "
                               "cxlkit that pickled it").c_str());
    R r;
    std::memcpy(&r, state.c_str(), sizeof r);
    new (&self) R(r);
}

template <class R> Record<R> &Record<R>::pickle_bytes() {
    static_assert(std::is_trivially_copyable_v<R>, "pickled as bytes: a plain C struct only");
    cls_.def("__getstate__", &getstate).def("__setstate__", &setstate);
    return *this;
}

}  // namespace cxk::py
