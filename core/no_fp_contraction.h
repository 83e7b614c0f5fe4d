// Included by a source file, before its own code, to switch off floating-point contraction
// for the rest of that file: the compiler may then not fuse a * b + c into one fma, which
// rounds once instead of twice. The optimizers' files match torch bit for bit only with the
// roundings torch's own build makes (Note [matching torch bit for bit] in
// backends/optimizer_update.cpp); where torch fuses, they call std::fma themselves.
// gcc builds Tandem; clang 14 builds its sanitizer jobs, and each knows only its own pragma.
// Only for .cpp files: a header's pragma would reach every file that includes it.
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
