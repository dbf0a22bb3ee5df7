// Mutex and MutexLock: std::mutex with clang's thread-safety annotations, so
// that a member marked GUARDED_BY(mu_) read or written without holding mu_ is
// a compile error in a clang build (CI's fuzz build compiles every library
// with -Werror=thread-safety). libstdc++'s std::mutex carries no
// annotations; LevelDB's port::Mutex and Abseil's Mutex are the models.
//
// Waiting: std::condition_variable_any waits on a Mutex directly
// (cv.wait(mu_, pred) while a MutexLock holds it). The analysis does not see
// that a predicate lambda runs with mu_ held: call mu_.AssertHeld() first in
// such a lambda.
//
// With another compiler the annotations compile to nothing.

#ifndef DROVER_COMMON_MUTEX_H_
#define DROVER_COMMON_MUTEX_H_

#include <mutex>

#if defined(__clang__)
#define DROVER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DROVER_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) DROVER_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY DROVER_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) DROVER_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) DROVER_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) DROVER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) DROVER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) DROVER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) DROVER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) DROVER_THREAD_ANNOTATION(assert_capability(x))
#define NO_THREAD_SAFETY_ANALYSIS DROVER_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace drover {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis that the caller holds this mutex (a predicate lambda
  // run by a condition variable wait); checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope (std::unique_lock's role): Unlock() lets go
// for a while (a slow call outside the lock), Lock() takes it back.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() {
    if (locked_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_.unlock();
    locked_ = false;
  }
  void Lock() ACQUIRE() {
    mu_.lock();
    locked_ = true;
  }

 private:
  Mutex& mu_;
  bool locked_ = true;
};

}  // namespace drover

#endif  // DROVER_COMMON_MUTEX_H_
