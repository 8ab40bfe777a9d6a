// Enumerations read by name (deck choices, profile files): each specialises EnumNames with
// the names of its values in declaration order (the values are 0..N-1). That table is the
// only list of the names: enum_name, enum_from_name and the deck's choices (keys.hpp) read it.
#pragma once
#include <cstddef>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace pt {

// Specialise for an enum E: `static constexpr const char* names[] = {"a", "b"};`
template <class E>
struct EnumNames;

template <class E, class = void>
struct is_named_enum : std::false_type {};
template <class E>
struct is_named_enum<E, std::void_t<decltype(EnumNames<E>::names)>> : std::is_enum<E> {};
template <class E>
inline constexpr bool is_named_enum_v = is_named_enum<E>::value;

template <class E>
const char* enum_name(E e) {
  static_assert(is_named_enum_v<E>, "enum_name: the enum has no EnumNames table");
  return EnumNames<E>::names[static_cast<size_t>(e)];
}

// The value called `name`; none when no value is.
template <class E>
std::optional<E> enum_from_name(std::string_view name) {
  static_assert(is_named_enum_v<E>, "enum_from_name: the enum has no EnumNames table");
  for (size_t i = 0; i < std::size(EnumNames<E>::names); ++i)
    if (name == EnumNames<E>::names[i]) return static_cast<E>(i);
  return std::nullopt;
}

template <class E>
std::vector<std::string> enum_names() {
  static_assert(is_named_enum_v<E>, "enum_names: the enum has no EnumNames table");
  return std::vector<std::string>(std::begin(EnumNames<E>::names), std::end(EnumNames<E>::names));
}

}  // namespace pt
