// NumPy's files: .npy (numpy.save: one array) and .npz (numpy.savez and
// numpy.savez_compressed: a zip archive of .npy files, one per keyword).
//
// A .npy file is the magic "\x93NUMPY", a version (1.0, 2.0 or 3.0), the length of a
// header, the header (a Python dict literal: {'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 4), }), then the data in C order. The reader is strict: a header that is not
// exactly that dict is refused. As with safetensors (safetensors.h), Tandem holds float32
// and int64: float32 and int64 are taken as they are, float64 and float16 become float32
// (float64 loses precision), int32, int16, int8, uint8 and bool become int64. Big-endian
// data, Fortran order, object arrays, structured arrays and other dtypes are refused by name.
#pragma once

#include <span>
#include <string>

#include "core/tensor.h"

namespace tandem {

/// The array in the bytes of a .npy file; `what` (the file, or the archive's member)
/// begins every error message.
Tensor parse_npy(std::span<const std::byte> bytes, const std::string& what);

/// A .npy file's array. UserError naming the file and what is wrong with it.
Tensor read_npy(const std::string& path);

/// A .npz file's arrays by name (a member "x.npy" is "x"), stored or deflated.
/// UserError naming the file and member and what is wrong.
TensorMap read_npz(const std::string& path);

}  // namespace tandem
