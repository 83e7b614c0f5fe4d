// Relayout: moves a tensor between the plain layout Tandem stores (NCHW, OIHW) and the
// layout a oneDNN primitive chose for it (format_tag::any), through a buffer the kernel
// owns. When the two layouts are equal it does nothing and the primitive reads or writes
// the user's memory directly. The reorder primitive is built (and cached) at compile
// time; the buffer is allocated on first use, so a kernel that never runs backward holds
// no backward buffers.
#pragma once

#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/cpu_context.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem::cpu {

class Relayout {
 public:
  enum class Kind { input, output, accumulate };

  Relayout() = default;
  /// input: user (`user_md`) -> buffer (`prim_md`) before the primitive reads it.
  /// output: buffer -> user after the primitive wrote it; accumulate: the same with +=
  /// (a parameter gradient), needed even when the layouts are equal.
  Relayout(CpuContext& ctx, const std::string& key, const dnnl::memory::desc& user_md,
           const dnnl::memory::desc& prim_md, Kind kind)
      : ctx_(&ctx), prim_md_(prim_md), kind_(kind) {
    if (kind != Kind::accumulate && user_md == prim_md) return;
    const bool in = kind == Kind::input;
    dnnl::engine& eng = ctx.engine();
    dnnl::primitive_attr attr = user_scratchpad_attr();
    if (kind == Kind::accumulate) {
      dnnl::post_ops sum;
      sum.append_sum(1.f);
      attr.set_post_ops(sum);
    }
    const dnnl::memory::desc& from = in ? user_md : prim_md;
    const dnnl::memory::desc& to = in ? prim_md : user_md;
    dnnl::reorder::primitive_desc pd(eng, from, eng, to, attr);
    reorder_ = DnnlCall(ctx.cached_primitive(key, [&] { return dnnl::reorder(pd); }));
    from_ = reorder_.bind(DNNL_ARG_FROM, from, eng);
    to_ = reorder_.bind(DNNL_ARG_TO, to, eng);
  }

  bool needed() const { return reorder_.valid(); }

  /// Works in `other`'s buffer (the same layout) from now on: for two tensors of one kernel
  /// that are never needed at once, such as a pooling's x (read in forward) and its dx
  /// (written in backward). Allocates that buffer now.
  void share_buffer(Relayout& other) {
    if (!needed() || !other.needed()) return;
    other.buffer();
    buffer_ = other.buffer_;
  }

  /// For an input: the memory the primitive should read (the buffer, filled from `user`,
  /// or `user` itself).
  const void* read(const void* user) {
    if (!needed()) return user;
    reorder_.set(from_, user);
    reorder_.set(to_, buffer());
    reorder_.run(*ctx_);
    return buffer();
  }
  /// For an input whose read() is still current (needed()): the buffer it filled.
  const void* last_read() { return buffer(); }
  /// For an output: the memory the primitive should write; then call finish(user).
  void* target(void* user) { return needed() ? buffer() : user; }
  void finish(void* user) {
    if (!needed()) return;
    reorder_.set(from_, buffer());
    reorder_.set(to_, user);
    reorder_.run(*ctx_);
  }

 private:
  void* buffer() {
    if (!buffer_) buffer_ = dnnl::memory(prim_md_, ctx_->engine());
    return buffer_.get_data_handle();
  }

  CpuContext* ctx_ = nullptr;
  dnnl::memory::desc prim_md_;
  Kind kind_ = Kind::input;
  DnnlCall reorder_;
  size_t from_ = 0, to_ = 0;
  dnnl::memory buffer_;
};

}  // namespace tandem::cpu
