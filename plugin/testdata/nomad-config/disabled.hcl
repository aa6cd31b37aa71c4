enabled = false
interposer {
  gc_after = "2h"
}
