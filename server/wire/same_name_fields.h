// Field lists for the mappings in this folder: where a core type and its
// message name a field alike and it holds a plain value (a number, a bool, a
// string), a list names it once for both directions, so that ToProto and
// FromProto cannot drift apart. A list is an X-macro: LIST(F) is F(field) for
// each of its fields. The mapping functions name their arguments `in` and `out`.
#pragma once

// out.set_field(in.field): a core value into its message.
#define WIRE_SET(field) out.set_##field(in.field);
// out.field = in.field(): a message into its core value.
#define WIRE_GET(field) out.field = in.field();
