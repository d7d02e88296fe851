// ddk emulation runtime, internal: the execution contexts fibers run on (the context switch) and their stacks.
// Shared by the runtime's files only (see README.md, "Files"); fibers.cpp holds the switch itself.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) && !defined(DDK_EMU_UCONTEXT)
#define DDK_EMU_ASM_SWITCH 1
#else
#define DDK_EMU_ASM_SWITCH 0
#include <ucontext.h>
#endif

// Builds with -fsanitize=address tell ASan about every stack switch (and unpoison reused fiber
// stacks), so kernels can be checked for out-of-bounds global-memory accesses.
#if defined(__SANITIZE_ADDRESS__)
#define DDK_EMU_ASAN 1
#include <pthread.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#else
#define DDK_EMU_ASAN 0
#endif

#pragma GCC visibility push(hidden)

namespace ddk::emu::detail {

// ------------------------------------------------------------------------------ context switch --
//
// x86-64: a hand-written switch saving the System V callee-saved registers (rbx, rbp, r12-r15) on the
// old stack and swapping stack pointers; MXCSR and the x87 control word are not switched (kernels
// do not change them). Elsewhere, or with -DDDK_EMU_UCONTEXT, ucontext's swapcontext (which also
// saves the signal mask: a system call per switch, so much slower).

#if DDK_EMU_ASM_SWITCH
extern "C" void ddk_emu_switch_ctx(void** save_sp, void* new_sp);
extern "C" void ddk_emu_fiber_trampoline();

struct Context {
  void* sp = nullptr;
  const void* stack_lo = nullptr;  // for ASan's fiber annotations
  std::size_t stack_size = 0;
};

inline void raw_switch(Context* from, Context* to) { ddk_emu_switch_ctx(&from->sp, to->sp); }
#else
struct Context {
  ucontext_t uc;
  const void* stack_lo = nullptr;  // for ASan's fiber annotations
  std::size_t stack_size = 0;
};

inline void raw_switch(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

// A fresh context that, when switched to, calls entry(arg) on the given stack (entry never returns).
void init_context(Context& c, char* stack_lo, std::size_t bytes, void (*entry)(void*), void* arg);

// Switches from `from` to `to`; returns when something switches back to `from`. `from_dying`: `from`
// will never be resumed (lets ASan drop its fake stack).
inline void switch_ctx(Context* from, Context* to, bool from_dying = false) {
#if DDK_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(from_dying ? nullptr : &fake, to->stack_lo, to->stack_size);
  raw_switch(from, to);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)from_dying;
  raw_switch(from, to);
#endif
}

// First thing on a fresh context's stack.
inline void context_started() {
#if DDK_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
}

// The calling OS thread's own stack, for switches back to it under ASan.
inline void adopt_thread_stack(Context& c) {
#if DDK_EMU_ASAN
  if (c.stack_lo != nullptr) return;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* lo = nullptr;
    std::size_t size = 0;
    pthread_attr_getstack(&attr, &lo, &size);
    pthread_attr_destroy(&attr);
    c.stack_lo = lo;
    c.stack_size = size;
  }
#else
  (void)c;
#endif
}

inline void unpoison_stack(char* lo, std::size_t bytes) {
#if DDK_EMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(lo, bytes);
#else
  (void)lo;
  (void)bytes;
#endif
}

// The fibers' stack size: $DDK_EMU_STACK_KB (at least 128), else 256 KB.
std::size_t stack_bytes_from_env();

inline std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

struct Stack {
  char* map = nullptr;  // guard page first, then the usable stack
  std::size_t map_bytes = 0;
  char* lo = nullptr;
  std::size_t bytes = 0;

  bool allocate(std::size_t usable) {
    const std::size_t pg = page_size();
    usable = (usable + pg - 1) / pg * pg;
    void* p = mmap(nullptr, usable + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    map = static_cast<char*>(p);
    map_bytes = usable + pg;
    mprotect(map, pg, PROT_NONE);  // overflow -> SIGSEGV instead of silent corruption
    lo = map + pg;
    bytes = usable;
    return true;
  }
  Stack() = default;
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  ~Stack() {
    if (map != nullptr) munmap(map, map_bytes);
  }
};

}  // namespace ddk::emu::detail

#pragma GCC visibility pop
