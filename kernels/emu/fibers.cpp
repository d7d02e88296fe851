// ddk emulation runtime: the context switch the threads of a block (fibers) run on, their stacks' size, and
// the switch's own timing (measure_switch_ns).
#include "runtime_internal.h"

#include <chrono>
#include <cstdlib>
#include <memory>

namespace ddk::emu {

namespace detail {

#if DDK_EMU_ASM_SWITCH
asm(R"(
  .text
  .p2align 4
  .globl ddk_emu_switch_ctx
  .hidden ddk_emu_switch_ctx
  .type ddk_emu_switch_ctx, @function
ddk_emu_switch_ctx:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ddk_emu_switch_ctx, .-ddk_emu_switch_ctx

  .p2align 4
  .globl ddk_emu_fiber_trampoline
  .hidden ddk_emu_fiber_trampoline
  .type ddk_emu_fiber_trampoline, @function
ddk_emu_fiber_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size ddk_emu_fiber_trampoline, .-ddk_emu_fiber_trampoline
)");

void init_context(Context& c, char* stack_lo, std::size_t bytes, void (*entry)(void*), void* arg) {
  const std::uintptr_t top = (reinterpret_cast<std::uintptr_t>(stack_lo) + bytes) & ~std::uintptr_t{15};
  // Frame popped by ddk_emu_switch_ctx: r15 r14 r13 r12 rbx rbp, then the return address. The
  // trampoline then runs with rsp = top - 16 (16-byte aligned), as a call requires.
  void** sp = reinterpret_cast<void**>(top - 72);
  sp[0] = nullptr;                                                // r15
  sp[1] = nullptr;                                                // r14
  sp[2] = reinterpret_cast<void*>(entry);                         // r13
  sp[3] = arg;                                                    // r12
  sp[4] = nullptr;                                                // rbx
  sp[5] = nullptr;                                                // rbp
  sp[6] = reinterpret_cast<void*>(&ddk_emu_fiber_trampoline);    // return address
  sp[7] = nullptr;
  sp[8] = nullptr;
  c.sp = sp;
  c.stack_lo = stack_lo;
  c.stack_size = bytes;
}
#else
namespace {

void uc_trampoline(unsigned e_hi, unsigned e_lo, unsigned a_hi, unsigned a_lo) {
  auto entry = reinterpret_cast<void (*)(void*)>((static_cast<std::uintptr_t>(e_hi) << 32) | e_lo);
  auto arg = reinterpret_cast<void*>((static_cast<std::uintptr_t>(a_hi) << 32) | a_lo);
  entry(arg);
  std::abort();
}

}  // namespace

void init_context(Context& c, char* stack_lo, std::size_t bytes, void (*entry)(void*), void* arg) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack_lo;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  const auto e = reinterpret_cast<std::uintptr_t>(entry);
  const auto a = reinterpret_cast<std::uintptr_t>(arg);
  makecontext(&c.uc, reinterpret_cast<void (*)()>(&uc_trampoline), 4, static_cast<unsigned>(e >> 32),
              static_cast<unsigned>(e), static_cast<unsigned>(a >> 32), static_cast<unsigned>(a));
  c.stack_lo = stack_lo;
  c.stack_size = bytes;
}
#endif

std::size_t stack_bytes_from_env() {
  std::size_t kb = 256;
  if (const char* s = std::getenv("DDK_EMU_STACK_KB")) {
    const long v = std::strtol(s, nullptr, 10);
    if (v > 0) kb = static_cast<std::size_t>(v);
  }
  if (kb < 128) kb = 128;
  return kb * 1024;
}

}  // namespace detail

// Round-trip time of the raw context switch, halved: two contexts on this OS thread ping-pong.
double measure_switch_ns(int rounds) {
  using namespace detail;
  struct Bench {
    Context main_ctx, fiber_ctx;
    Stack stack;
    static void loop(void* p) {
      context_started();
      auto* b = static_cast<Bench*>(p);
      for (;;) switch_ctx(&b->fiber_ctx, &b->main_ctx);
    }
  };
  auto b = std::make_unique<Bench>();
  if (!b->stack.allocate(128 * 1024)) return -1.0;
  init_context(b->fiber_ctx, b->stack.lo, b->stack.bytes, &Bench::loop, b.get());
  adopt_thread_stack(b->main_ctx);
  switch_ctx(&b->main_ctx, &b->fiber_ctx);  // warm up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) switch_ctx(&b->main_ctx, &b->fiber_ctx);
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / (2.0 * rounds);
}

}  // namespace ddk::emu
