;; Misbehaves: the policy hook grows a wasm table until the host's table-element bound
;; stops it. Written by hand because Rust (stable) cannot emit `table.grow`; the test
;; support wraps it into a `weft:plugin@0.2.0` component with wit-component, so it is
;; loaded exactly like a plugin built with the SDK.
;;
;; The exports follow the canonical ABI's flattening of the hooks in
;; plugin-sdk/wit/weft-plugin.wit. The arguments are never read: each export resets a
;; bump allocator, so what the host lowered for one call is reused by the next.
(module
  (memory (export "memory") 1)
  (table $grown 1 funcref)
  ;; Return areas: the policy's `decision` at 16, `init`'s `result` at 32.
  (global $heap (mut i32) (i32.const 1024))

  (func (export "cabi_realloc")
        (param $old i32) (param $old_size i32) (param $align i32) (param $size i32)
        (result i32)
    (local $at i32)
    (local.set $at
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $at) (local.get $size)))
    (if (i32.gt_u (global.get $heap) (i32.shl (memory.size) (i32.const 16)))
      (then
        (if (i32.eq
              (memory.grow
                (i32.add
                  (i32.shr_u
                    (i32.sub (global.get $heap) (i32.shl (memory.size) (i32.const 16)))
                    (i32.const 16))
                  (i32.const 1)))
              (i32.const -1))
          (then unreachable))))
    (local.get $at))

  (func $reset (global.set $heap (i32.const 1024)))

  ;; init: func(config: string) -> result<_, string>: always ok.
  (func (export "weft:plugin/hooks@0.2.0#init") (param i32 i32) (result i32)
    (call $reset)
    (i32.store8 (i32.const 32) (i32.const 0))
    (i32.const 32))

  ;; The sync hooks: func(cluster: cluster), eight flat values; nothing to do.
  (func (export "weft:plugin/hooks@0.2.0#on-identities-synced")
        (param i32 i32 i32 i32 i32 i32 i32 i32)
    (call $reset))
  (func (export "weft:plugin/hooks@0.2.0#on-nodes-synced")
        (param i32 i32 i32 i32 i32 i32 i32 i32)
    (call $reset))
  (func (export "weft:plugin/hooks@0.2.0#on-ipcache-synced")
        (param i32 i32 i32 i32 i32 i32 i32 i32)
    (call $reset))
  (func (export "weft:plugin/hooks@0.2.0#on-services-synced")
        (param i32 i32 i32 i32 i32 i32 i32 i32)
    (call $reset))
  (func (export "weft:plugin/hooks@0.2.0#on-cluster-disconnected")
        (param i32 i32 i32 i32 i32 i32 i32 i32)
    (call $reset))

  ;; regeneration-policy: func(request) -> decision. The request flattens to 14 values
  ;; (endpoint: 8, reason, ipsec, wireguard, the timeout as i64, the clusters' list).
  ;; Grows the table a thousand elements at a time until growing fails; were that to
  ;; return -1 instead of trapping, it would answer no-opinion (variant case 2).
  (func (export "weft:plugin/hooks@0.2.0#regeneration-policy")
        (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i64 i32 i32)
        (result i32)
    (call $reset)
    (loop $more
      (br_if $more
        (i32.ne (table.grow $grown (ref.null func) (i32.const 1000)) (i32.const -1))))
    (i32.store8 (i32.const 16) (i32.const 2))
    (i32.const 16))

  ;; peer-gc-policy: func(request) -> peer-gc-decision: no-opinion (case 2).
  (func (export "weft:plugin/hooks@0.2.0#peer-gc-policy")
        (param i32 i32 i32 i32) (result i32)
    (call $reset)
    (i32.store8 (i32.const 16) (i32.const 2))
    (i32.const 16))
)
