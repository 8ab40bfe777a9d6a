// Typed deck keys. A key is declared once, with the member (or accessor) it fills, its
// default, range and doc (key(), required_key()); the C++ type of that member fixes the key's
// TOML type at compile time (KeyTraits): int64_t an integer, double a float, bool a boolean,
// std::string a string, std::vector<int64_t> an array of integers, a named enum
// (enum_names.hpp) a string choice of its names (std::optional of one: also "auto";
// PerStage of one: one name for every stage or an array of names, one per stage), a
// `const Entry*` of a NamedRegistry (registry.hpp) a string choice of the registry's names.
// A value travels between the parser, the printers and weights.h5 as a KeyValue; the key
// alone converts it to and from its member's type, so a key cannot write a member of another
// type, and a default of another kind does not compile. The deck's sections
// (src/deck/schema.cpp), the [[cluster.levels]] tables and every layer type (its own .cpp in
// src/layers, layers.hpp) declare their keys this way; toml++ stays in src/deck.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "pipetrain/enum_names.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/registry.hpp"

namespace pt {

// A numeric key's allowed range (docs/DECK.md prints it; the parser checks it).
struct KeyRange {
  bool has_lo = false, lo_open = false, has_hi = false, hi_open = false;
  double lo = 0, hi = 0;
};
KeyRange key_ge(double v);
KeyRange key_gt(double v);
KeyRange key_between(double lo, double hi, bool hi_open = false);

// What a key's value is in TOML; follows from the member's C++ type (KeyTraits).
enum class KeyType : uint8_t { integer, floating, boolean, string, choice, int_list, int_list_or_auto, choice_per_stage };
const char* key_type_name(KeyType t);  // as docs/DECK.md and messages say it: "integer", "float", ...

// A value in transit: integer, float, boolean, string (a choice's name, "auto"), integer array,
// string array (a choice per stage).
using KeyValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<std::string>>;

// What the schema knows of a key, whatever it fills.
struct KeyInfo {
  std::string name;
  KeyType type = KeyType::integer;
  std::optional<KeyValue> def;       // none: a required key
  KeyRange range;
  std::vector<std::string> choices;  // KeyType::choice: the allowed names, in the order docs list them
  std::string doc;
  bool required() const { return !def.has_value(); }
};

// One key of an Owner (a deck section, a layer type's settings): its schema entry and the
// typed conversion between its member and a KeyValue.
template <class Owner>
struct Key {
  KeyInfo info;
  std::function<KeyValue(const Owner&)> get;
  std::function<void(Owner&, const KeyValue&)> set;
  // A string key restricted to `names` (e.g. the schedule registry's): a choice.
  Key choices(std::vector<std::string> names) && {
    PT_CHECK(info.type == KeyType::string, "key " << info.name << ": only a string key takes choices");
    info.type = KeyType::choice;
    info.choices = std::move(names);
    return std::move(*this);
  }
};

// parallel.split: an array of integers, or "auto".
struct IntListOrAuto {
  bool is_auto = false;
  std::vector<int64_t> list;
};

// parallel.recompute: one value of a named enum E for every stage (a single entry), or one per
// stage in stage order. at(s) is stage s's; the deck checks the length against the stages.
template <class E>
struct PerStage {
  static_assert(is_named_enum_v<E>, "PerStage holds a named enum (enum_names.hpp)");
  using value_type = E;
  std::vector<E> values = {E{}};
  PerStage() = default;
  PerStage(E e) : values{e} {}  // NOLINT: one value for every stage (a key's default)
  explicit PerStage(std::vector<E> v) : values(std::move(v)) {}
  bool uniform() const { return values.size() == 1; }
  E at(int stage) const { return uniform() ? values.front() : values.at(static_cast<size_t>(stage)); }
  // One value per stage for K stages (the single value repeated).
  std::vector<E> for_stages(int K) const {
    return uniform() ? std::vector<E>(static_cast<size_t>(K), values.front()) : values;
  }
  bool operator==(const PerStage& o) const { return values == o.values; }
};

// ---- the C++ type -> TOML type table ----------------------------------------------------

template <class T, class = void>
struct KeyTraits;  // no definition: T is not a key type (a compile error where a key fills it)

template <class T, KeyType K>
struct PlainKeyTraits {
  static constexpr KeyType type = K;
  static std::vector<std::string> choices() { return {}; }
  static KeyValue to_value(const T& v) { return KeyValue(std::in_place_type<T>, v); }
  static T from_value(const KeyValue& v) { return std::get<T>(v); }
};
template <>
struct KeyTraits<int64_t> : PlainKeyTraits<int64_t, KeyType::integer> {};
template <>
struct KeyTraits<double> : PlainKeyTraits<double, KeyType::floating> {};
template <>
struct KeyTraits<bool> : PlainKeyTraits<bool, KeyType::boolean> {};
template <>
struct KeyTraits<std::string> : PlainKeyTraits<std::string, KeyType::string> {};
template <>
struct KeyTraits<std::vector<int64_t>> : PlainKeyTraits<std::vector<int64_t>, KeyType::int_list> {};

template <class E>
struct KeyTraits<E, std::enable_if_t<is_named_enum_v<E>>> {
  static constexpr KeyType type = KeyType::choice;
  static std::vector<std::string> choices() { return enum_names<E>(); }
  static KeyValue to_value(E e) { return KeyValue(std::string(enum_name(e))); }
  static E from_value(const KeyValue& v) {
    const std::optional<E> e = enum_from_name<E>(std::get<std::string>(v));
    PT_CHECK(e, "'" << std::get<std::string>(v) << "' is not a value of the key's enumeration");
    return *e;
  }
};

// A named enum or "auto" (std::nullopt: decided elsewhere).
template <class E>
struct KeyTraits<std::optional<E>, std::enable_if_t<is_named_enum_v<E>>> {
  static constexpr KeyType type = KeyType::choice;
  static std::vector<std::string> choices() {
    std::vector<std::string> c = {"auto"};
    for (auto& n : enum_names<E>()) c.push_back(n);
    return c;
  }
  static KeyValue to_value(const std::optional<E>& e) { return e ? KeyTraits<E>::to_value(*e) : KeyValue(std::string("auto")); }
  static std::optional<E> from_value(const KeyValue& v) {
    if (std::get<std::string>(v) == "auto") return std::nullopt;
    return KeyTraits<E>::from_value(v);
  }
};

// An entry of a NamedRegistry (optimizers, learning-rate schedules): chosen by name.
template <class Entry>
struct KeyTraits<const Entry*, std::enable_if_t<std::is_same_v<decltype(Entry::name), std::string>>> {
  static constexpr KeyType type = KeyType::choice;
  static std::vector<std::string> choices() { return NamedRegistry<Entry>::instance().names(); }
  static KeyValue to_value(const Entry* e) { return KeyValue(e ? e->name : std::string()); }
  static const Entry* from_value(const KeyValue& v) {
    const Entry* e = NamedRegistry<Entry>::instance().find(std::get<std::string>(v));
    PT_CHECK(e, "'" << std::get<std::string>(v) << "' is not a registered name");
    return e;
  }
};

template <>
struct KeyTraits<IntListOrAuto> {
  static constexpr KeyType type = KeyType::int_list_or_auto;
  static std::vector<std::string> choices() { return {}; }
  static KeyValue to_value(const IntListOrAuto& v) { return v.is_auto ? KeyValue(std::string("auto")) : KeyValue(v.list); }
  static IntListOrAuto from_value(const KeyValue& v) {
    if (std::holds_alternative<std::string>(v)) return {true, {}};
    return {false, std::get<std::vector<int64_t>>(v)};
  }
};

// One name (every stage) or an array of names (one per stage); in transit a string or a string array.
template <class E>
struct KeyTraits<PerStage<E>> {
  static constexpr KeyType type = KeyType::choice_per_stage;
  static std::vector<std::string> choices() { return enum_names<E>(); }
  static KeyValue to_value(const PerStage<E>& v) {
    if (v.uniform()) return KeyTraits<E>::to_value(v.values.front());
    std::vector<std::string> names;
    for (E e : v.values) names.emplace_back(enum_name(e));
    return KeyValue(names);
  }
  static PerStage<E> from_value(const KeyValue& v) {
    if (std::holds_alternative<std::string>(v)) return PerStage<E>(KeyTraits<E>::from_value(v));
    std::vector<E> out;
    for (const std::string& n : std::get<std::vector<std::string>>(v)) out.push_back(KeyTraits<E>::from_value(KeyValue(n)));
    PT_CHECK(!out.empty(), "a per-stage key needs at least one value");
    return PerStage<E>(std::move(out));
  }
};

// ---- declaring keys ----------------------------------------------------------------------

namespace key_detail {

template <class F>
struct member_of {};  // not a member pointer: the owner must be named, key<Owner>(...)
template <class T, class C>
struct member_of<T C::*> {
  using type = C;
};
template <class Owner, class F>
struct owner_of {
  using type = Owner;
};
template <class F>
struct owner_of<void, F> : member_of<F> {};

template <class T, class = void>
struct has_traits : std::false_type {};
template <class T>
struct has_traits<T, std::void_t<decltype(KeyTraits<T>::type)>> : std::true_type {};

template <class F, class O>
using field_t = std::remove_cv_t<std::remove_reference_t<std::invoke_result_t<F, O&>>>;

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class T>
struct is_per_stage : std::false_type {};
template <class E>
struct is_per_stage<PerStage<E>> : std::true_type {};

template <class T, class = void>
struct is_entry : std::false_type {};
template <class E>
struct is_entry<const E*, std::enable_if_t<std::is_same_v<decltype(E::name), std::string>>> : std::true_type {};

// Whether a default of type D fits a key of type T: the same kind of value (an integer for an
// integer key, not a bool or a string; a registry entry's name for an entry key).
template <class T, class D>
constexpr bool default_fits() {
  if constexpr (!has_traits<T>::value) return false;
  else if constexpr (std::is_same_v<T, bool>) return std::is_same_v<D, bool>;
  else if constexpr (std::is_same_v<T, int64_t>) return std::is_integral_v<D> && !std::is_same_v<D, bool>;
  else if constexpr (std::is_same_v<T, double>) return std::is_arithmetic_v<D> && !std::is_same_v<D, bool>;
  else if constexpr (std::is_same_v<T, std::string> || is_entry<T>::value) return std::is_convertible_v<D, std::string>;
  else if constexpr (is_optional<T>::value) return std::is_constructible_v<T, D> && !std::is_same_v<D, bool>;
  else if constexpr (is_per_stage<T>::value) return std::is_same_v<D, typename T::value_type> || std::is_same_v<D, T>;
  else return std::is_same_v<D, T>;
}

template <class T, class D>
KeyValue default_value(const D& def) {
  if constexpr (is_entry<T>::value) return KeyValue(std::string(def));
  else return KeyTraits<T>::to_value(static_cast<T>(def));
}

template <class T, class Owner, class Get, class Set>
Key<Owner> make(std::string name, Get get, Set set, std::optional<KeyValue> def, KeyRange range, std::string doc) {
  static_assert(has_traits<T>::value,
                "a key fills an int64_t, double, bool, std::string, std::vector<int64_t>, a named enum (or std::optional "
                "or PerStage of one), a const pointer to a registry entry, or an IntListOrAuto");
  using Traits = KeyTraits<T>;
  Key<Owner> k;
  k.info = KeyInfo{std::move(name), Traits::type, std::move(def), range, Traits::choices(), std::move(doc)};
  k.get = [get](const Owner& o) { return Traits::to_value(get(o)); };
  k.set = [set](Owner& o, const KeyValue& v) { set(o, Traits::from_value(v)); };
  return k;
}

template <class T, class Owner, class Field>
Key<Owner> make_field(std::string name, Field field, std::optional<KeyValue> def, KeyRange range, std::string doc) {
  return make<T, Owner>(
      std::move(name), [field](const Owner& o) -> T { return std::invoke(field, o); },
      [field](Owner& o, T v) { std::invoke(field, o) = std::move(v); }, std::move(def), range, std::move(doc));
}

}  // namespace key_detail

// A key that fills `field` of its Owner (a member pointer, whose class is the Owner; or, with
// key<Owner>, any callable returning a reference into an Owner&), with a default of the same
// kind, a range (numbers) and a doc.
template <class Owner = void, class Field, class D, class O = typename key_detail::owner_of<Owner, Field>::type,
          class T = key_detail::field_t<Field, O>, std::enable_if_t<key_detail::default_fits<T, D>(), int> = 0>
Key<O> key(std::string name, Field field, D def, KeyRange range, std::string doc) {
  return key_detail::make_field<T, O>(std::move(name), field, key_detail::default_value<T>(def), range, std::move(doc));
}
template <class Owner = void, class Field, class D, class O = typename key_detail::owner_of<Owner, Field>::type,
          class T = key_detail::field_t<Field, O>, std::enable_if_t<key_detail::default_fits<T, D>(), int> = 0>
Key<O> key(std::string name, Field field, D def, std::string doc) {
  return key<O>(std::move(name), field, def, KeyRange{}, std::move(doc));
}

// A key the table must set (no default).
template <class Owner = void, class Field, class O = typename key_detail::owner_of<Owner, Field>::type,
          class T = key_detail::field_t<Field, O>>
Key<O> required_key(std::string name, Field field, KeyRange range, std::string doc) {
  return key_detail::make_field<T, O>(std::move(name), field, std::nullopt, range, std::move(doc));
}

// A key whose value is not one member: read with get(const Owner&) -> T, written with
// set(Owner&, T) (parallel.split: split and split_auto).
template <class Owner, class Get, class Set, class D, class T = std::decay_t<std::invoke_result_t<Get, const Owner&>>,
          std::enable_if_t<key_detail::default_fits<T, D>(), int> = 0>
Key<Owner> key_via(std::string name, Get get, Set set, D def, KeyRange range, std::string doc) {
  return key_detail::make<T, Owner>(std::move(name), get, set, key_detail::default_value<T>(def), range, std::move(doc));
}

// The same key on an Outer that holds its Inner: access(outer) returns the Inner (a section of
// the Deck; a layer type's settings behind their base).
template <class Outer, class Inner, class Access>
Key<Outer> rebind(Key<Inner> k, Access access) {
  Key<Outer> o;
  o.info = std::move(k.info);
  o.get = [get = std::move(k.get), access](const Outer& x) { return get(access(x)); };
  o.set = [set = std::move(k.set), access](Outer& x, const KeyValue& v) { set(access(x), v); };
  return o;
}

// Every key of section `prefix` ("run") of an Outer, named "prefix.key".
template <class Outer, class Inner>
std::vector<Key<Outer>> section_keys(const std::string& prefix, Inner Outer::*member, std::vector<Key<Inner>> keys) {
  std::vector<Key<Outer>> out;
  for (Key<Inner>& k : keys) {
    k.info.name = prefix + "." + k.info.name;
    out.push_back(rebind<Outer>(std::move(k), [member](auto& outer) -> auto& { return outer.*member; }));
  }
  return out;
}

// A value as TOML text (the effective deck, model_text): integers in decimal, floats in the
// shortest text that reads back the same double, strings quoted and escaped, arrays [a, b].
std::string key_value_text(const KeyValue& v);
// The same for documentation: floats as Python prints them (300.0, 0.05, 1e-08).
std::string key_value_doc(const KeyValue& v);
std::string key_range_text(const KeyRange& r);  // "> 0", "[0, 1)", "" (none)

}  // namespace pt
