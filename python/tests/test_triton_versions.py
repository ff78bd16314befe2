"""Triton 3.6-3.9 launch metadata -> wrapir's kernel `backend` fields, without torch or a GPU.

Run: `cd python && python3 -m unittest -q tests.test_triton_versions` (or from
python/tests: `python3 -m unittest -q test_triton_versions`).

The 3.6 metadata is a committed bundle's (exported with PyTorch 2.11 / Triton 3.6.0);
the 3.7, 3.8 and 3.9 ones are built field for field from the Triton wheels PyTorch
2.12/2.13 (Triton 3.7.1), 2.14 (3.8.0) and 2.15 (3.9.0) install, as the cache's
`<kernel>.json` would hold them for an sm_90 Inductor pointwise kernel. Each field's
origin is named next to it (paths relative to site-packages/triton/).
"""

from __future__ import annotations

import copy
import glob
import json
import os
import shutil
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON_DIR)
BUNDLES = os.path.join(REPO, "fixtures", "inductor", "bundles")
sys.path.insert(0, PYTHON_DIR)

from wrapir_export import kernels, launch  # noqa: E402
from wrapir_export.errors import Unconvertible  # noqa: E402

NAME = "triton_poi_fused_addmm_relu_0"

# backends/nvidia/compiler.py `CUDAOptions` as `CUDABackend.parse_options` fills
# them for sm_90 (the fields `extern_libs` and on follow): the same in 3.6 and 3.7.
CUDA_OPTIONS_SM90 = {
    "num_warps": 4, "num_ctas": 1, "num_stages": 1, "warp_size": 32, "maxnreg": None, "ptx_version": None,
    "ptx_options": None, "ir_override": None, "enable_fp_fusion": True, "enable_reflect_ftz": True,
    "launch_cooperative_grid": False, "launch_pdl": False,
    "supported_fp8_dtypes": ["fp8e4b15", "fp8e4nv", "fp8e5"], "deprecated_fp8_dot_operand_dtypes": ["fp8e4b15"],
    "default_dot_input_precision": "tf32", "allowed_dot_input_precisions": ["tf32", "tf32x3", "ieee", "bf16x3", "bf16x6"],
    "max_num_imprecise_acc_default": 1073741824,
}

# Triton 3.6.0: fixtures/inductor/bundles/addmm_relu/kernels/triton_poi_fused_addmm_relu_0.json,
# field `triton_metadata` (the cache's <kernel>.json, as exported).
META_36 = {
    "hash": "c9847041f2f7225db3b57a724b311d60109ed33c8b898a0ea7543ef3d67c524f",
    "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
    **CUDA_OPTIONS_SM90,
    "extern_libs": [["libdevice", "/opt/torch/.venv/lib/python3.12/site-packages/triton/backends/nvidia/lib/libdevice.10.bc"]],
    "debug": True, "backend_name": "cuda", "sanitize_overflow": False, "arch": "sm90", "instrumentation_mode": "",
    "triton_version": "3.6.0", "tensordesc_meta": [], "shared": 0, "tmem_size": 0,
    "global_scratch_size": 0, "global_scratch_align": 1, "profile_scratch_size": 0, "profile_scratch_align": 1,
    "name": NAME,
}

# Triton 3.7.1 (PyTorch 2.12.1 and 2.13.0).
META_37 = {
    # compiler/compiler.py `compile`: metadata = {"hash", "target", **options.__dict__, **env_vars}
    "hash": "0" * 64,  # placeholder: sha256 of the cache key
    "target": {"backend": "cuda", "arch": 90, "warp_size": 32},  # GPUTarget, JSON-dumped as a dict
    # backends/nvidia/compiler.py `CUDAOptions` (fields unchanged from 3.6; only the
    # `enable_iisan` property is new) as `CUDABackend.parse_options` fills them for sm_90
    **CUDA_OPTIONS_SM90,
    "extern_libs": [["libdevice", "<site-packages>/triton/backends/nvidia/lib/libdevice.10.bc"]],
    "debug": True, "backend_name": "cuda", "sanitize_overflow": False, "arch": "sm90",
    "instrumentation_mode": "",  # "consan" / "iisan" (3.7 adds iisan: compile-time only)
    # compiler/compiler.py `compile`: metadata["triton_version"] = __version__
    "triton_version": "3.7.1",
    # backends/nvidia/compiler.py `make_ttgir`: mod.get_tensordesc_metadata()
    "tensordesc_meta": [],
    # backends/nvidia/compiler.py `make_llir` ("Get some metadata"): get_int_attr(...),
    # the scratch sizes without a default (None when the attribute is absent)
    "shared": 0, "tmem_size": 0,
    "global_scratch_size": 0, "global_scratch_align": 1, "profile_scratch_size": 0, "profile_scratch_align": 1,
    # backends/nvidia/compiler.py `make_ptx`: the one `.visible .entry` name
    "name": NAME,
}

# Triton 3.8.0 (PyTorch 2.14.1): the same keys as 3.7; `make_llir` now reads
# `get_int_attr("ttg.global_scratch_memory_size") or 0` / `..._alignment") or 1`
# (never None); `CUDAOptions.__post_init__` adds extern_libs["gsan"] under GSan only.
META_38 = dict(META_37, hash="1" * 64, triton_version="3.8.0")

# Triton 3.9.0 (PyTorch 2.15.0): backends/nvidia/compiler.py `CUDAOptions` gains
# `sched4reg`, `clc`, `fpsan_homomorphic_casts`, `min_shared_mem` (in field order
# below); the `enable_fp_fusion` field default is False but `parse_options` sets it from
# knobs.language.fp_fusion_enabled (TRITON_DEFAULT_FP_FUSION, default True);
# `instrumentation_mode` is a comma-separated list (triton/_instrumentation.py `is_enabled`).
META_39 = {
    "hash": "2" * 64,
    "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
    "num_warps": 4, "num_ctas": 1, "num_stages": 1, "warp_size": 32, "maxnreg": None, "ptx_version": None,
    "ptx_options": None, "ir_override": None, "enable_fp_fusion": True, "sched4reg": False,
    "enable_reflect_ftz": True, "launch_cooperative_grid": False, "launch_pdl": False, "clc": False,
    "supported_fp8_dtypes": ["fp8e4b15", "fp8e4nv", "fp8e5"], "deprecated_fp8_dot_operand_dtypes": ["fp8e4b15"],
    "default_dot_input_precision": "tf32", "allowed_dot_input_precisions": ["tf32", "tf32x3", "ieee", "bf16x3", "bf16x6"],
    "max_num_imprecise_acc_default": 1073741824,
    "extern_libs": [["libdevice", "<site-packages>/triton/backends/nvidia/lib/libdevice.10.bc"]],
    "debug": True, "backend_name": "cuda", "sanitize_overflow": False, "arch": "sm90",
    "instrumentation_mode": "", "fpsan_homomorphic_casts": False, "min_shared_mem": None,
    "triton_version": "3.9.0", "tensordesc_meta": [], "shared": 0, "tmem_size": 0,
    "global_scratch_size": 0, "global_scratch_align": 1, "profile_scratch_size": 0, "profile_scratch_align": 1,
    "name": NAME,
}

METAS = {"3.6": META_36, "3.7": META_37, "3.8": META_38, "3.9": META_39}

SIGNATURE = {"in_out_ptr0": "*fp32", "in_ptr0": "*fp32", "xnumel": "i32", "XBLOCK": "constexpr"}
CONFIG = {"num_warps": 4, "num_stages": 1, "shared": 0}
EXPECTED = {"num_warps": 4, "num_stages": 1, "shared_mem": 0, "global_scratch": 0, "profile_scratch": 0,
            "mangled_name": NAME}


def fields(meta, **kw):
    return kernels.launch_fields(NAME, meta, CONFIG, SIGNATURE, **kw)


def with_(meta, **changes):
    m = copy.deepcopy(meta)
    m.update(changes)
    return m


class Mapping(unittest.TestCase):
    def test_every_version_maps_to_the_same_fields(self):
        for v, meta in METAS.items():
            with self.subTest(triton=v):
                self.assertEqual(kernels.triton_version(meta)[0], tuple(int(x) for x in v.split(".")))
                self.assertEqual(kernels.launch_problems(meta, SIGNATURE, kernels.triton_version(meta)[0]), [])
                self.assertEqual(fields(meta), EXPECTED)

    def test_scratch_sizes_and_warp_specialized_warps(self):
        # 3.8/3.9: consan or a kernel with device-side TMA descriptors gets global
        # scratch; make_llir overwrites num_warps with ttg.total-num-warps.
        for v in ("3.8", "3.9"):
            m = with_(METAS[v], global_scratch_size=384, global_scratch_align=128, num_warps=12, shared=98304)
            self.assertEqual(fields(m), dict(EXPECTED, global_scratch=384, num_warps=12, shared_mem=98304))

    def test_absent_scratch_attribute_of_37_is_a_zero_size(self):
        # 3.6/3.7 `get_int_attr` gives None without the module attribute; 3.8 made it
        # `or 0`. The launcher passes the pointer either way.
        m = with_(META_37, global_scratch_size=None, global_scratch_align=None)
        self.assertEqual(fields(m), EXPECTED)

    def test_metadata_order_and_extra_keys_do_not_matter(self):
        # KernelMetadata (compiler.py `CompiledKernel.__init__`) is a namedtuple of the
        # sorted keys; `_asdict()` gives them sorted. 3.9's new options are ignored.
        m = dict(sorted(META_39.items()))
        self.assertEqual(fields(m), EXPECTED)
        m = with_(META_39, clc=True, sched4reg=True, min_shared_mem=4096, tmem_size=128,
                  instrumentation_mode="fpsan,iisan", fpsan_homomorphic_casts=True)
        self.assertEqual(fields(m), EXPECTED)

    def test_config_fills_what_the_metadata_lacks(self):
        m = {"name": "k", "triton_version": "3.8.0", "global_scratch_size": 0, "profile_scratch_size": 0}
        got = kernels.launch_fields("k", m, {"num_warps": 8, "num_stages": 3, "shared": 512})
        self.assertEqual(got, {"num_warps": 8, "num_stages": 3, "shared_mem": 512, "global_scratch": 0,
                               "profile_scratch": 0, "mangled_name": "k"})

    def test_pre_36_metadata_keeps_the_old_mapping(self):
        # No version: scratch fields only where the metadata has them (as before).
        got = kernels.launch_fields("k", {"num_warps": 4, "num_stages": 2, "shared": 0, "name": "k"})
        self.assertEqual(got, {"num_warps": 4, "num_stages": 2, "shared_mem": 0, "mangled_name": "k"})

    def test_instrumentation_modes(self):
        self.assertEqual(kernels.instrumentation_modes({"instrumentation_mode": "fpsan, gsan"}, (3, 9)),
                         {"fpsan", "gsan"})
        self.assertEqual(kernels.instrumentation_modes({"instrumentation_mode": "gsan"}, (3, 8)), {"gsan"})
        self.assertEqual(kernels.instrumentation_modes({"instrumentation_mode": ""}, (3, 6)), set())


class Refusals(unittest.TestCase):
    def refused(self, meta, field, version, signature=SIGNATURE, **kw):
        with self.assertRaises(Unconvertible) as cm:
            kernels.launch_fields(NAME, meta, CONFIG, signature, **kw)
        msg = str(cm.exception)
        self.assertTrue(msg.startswith(f"kernel {NAME}: "), msg)
        self.assertIn(f"`{field}`", msg)
        self.assertIn(f"Triton {version}", msg)
        return msg

    def test_launch_attributes_in_every_version(self):
        for v, meta in METAS.items():
            tv = meta["triton_version"]
            with self.subTest(triton=v):
                self.assertIn("cooperative", self.refused(with_(meta, launch_cooperative_grid=True),
                                                          "launch_cooperative_grid", tv))
                self.assertIn("programmatic dependent launch", self.refused(with_(meta, launch_pdl=True),
                                                                            "launch_pdl", tv))
                self.assertIn("cluster", self.refused(with_(meta, num_ctas=2), "num_ctas", tv))
                self.refused(with_(meta, warp_size=64), "warp_size", tv)
                self.refused(with_(meta, global_scratch_size=64, global_scratch_align=1024),
                             "global_scratch_align", tv)

    def test_tma_descriptors(self):
        # backends/nvidia/compiler.py `make_ttgir`: one entry per descriptor argument
        # (3.8 driver.py `make_tensordesc_arg` also reads `is_im2col`).
        entry = {"swizzle": 3, "elem_size": 2, "elem_type": 6, "block_size": [64, 64], "fp4_padded": False,
                 "is_im2col": False}
        sig = {"a_desc": "tensordesc<fp16[64, 64]>", "out_ptr": "*fp16"}
        for v, meta in METAS.items():
            with self.subTest(triton=v):
                msg = self.refused(with_(meta, tensordesc_meta=[entry]), "tensordesc_meta",
                                   meta["triton_version"], signature=sig)
                self.assertIn("`signature`", msg)  # the parameter is named too
                self.assertIn("`a_desc`", msg)
        self.refused(META_39, "signature", "3.9.0", signature={"d": "nvTmaDesc"})

    def test_oversized_shared_memory(self):
        # 3.8 driver.c `_launch`: shared_memory > 228 KiB gets
        # CU_LAUNCH_ATTRIBUTE_SHARED_MEMORY_MODE (sm_107 oversized shared memory).
        msg = self.refused(with_(META_38, shared=240 * 1024), "shared", "3.8.0")
        self.assertIn("SHARED_MEMORY_MODE", msg)
        self.assertEqual(fields(with_(META_38, shared=228 * 1024))["shared_mem"], 228 * 1024)

    def test_gsan(self):
        # 3.8 driver.py `CudaLauncher.__init__`: "gsan" in instrumentation_mode appends
        # `_gsan_globals_ptr` (*i8); 3.9 appends `_gsan_launch_table_ptr` and
        # `_gsan_launch_index` too.
        msg = self.refused(with_(META_38, instrumentation_mode="gsan"), "instrumentation_mode", "3.8.0")
        self.assertIn("_gsan_globals_ptr", msg)
        self.assertNotIn("_gsan_launch_index", msg)
        msg = self.refused(with_(META_39, instrumentation_mode="fpsan,gsan", min_shared_mem=232448),
                           "instrumentation_mode", "3.9.0")
        self.assertIn("_gsan_launch_index", msg)

    def test_newer_triton(self):
        msg = self.refused(with_(META_39, triton_version="3.10.0"), "triton_version", "3.10.0")
        self.assertIn("3.6-3.9", msg)

    def test_unknown_scratch_sizes(self):
        # Metadata rebuilt from a launcher object, without the scratch sizes, under a
        # running Triton >= 3.6 (whose launcher always passes both pointers).
        m = {"name": NAME, "num_warps": 4, "shared": 0, "num_stages": 1}
        msg = self.refused(m, "global_scratch_size", "3.9.0 (the running Triton", running="3.9.0")
        self.assertIn("`profile_scratch_size`", msg)

    def test_every_problem_is_reported(self):
        m = with_(META_39, launch_pdl=True, num_ctas=2)
        msg = self.refused(m, "launch_pdl", "3.9.0")
        self.assertIn("`num_ctas`", msg)

    def test_launcher_refuses_too(self):
        backend = {"kind": "triton", "signature": dict(SIGNATURE), "num_warps": 4, "cubin": "kernels/k.cubin",
                   "global_scratch": 0, "profile_scratch": 0}
        k = launch.TritonKernel("k", backend, "/b", META_39)
        self.assertEqual(k.scratch, [0, 0])
        with self.assertRaises(launch.LaunchError) as cm:
            launch.TritonKernel("k", backend, "/b", with_(META_39, instrumentation_mode="gsan"))
        self.assertIn("Triton 3.9.0", str(cm.exception))
        with self.assertRaises(launch.LaunchError):
            launch.TritonKernel("k", backend, "/b", with_(META_37, launch_pdl=True))


class StaticKernelFallback(unittest.TestCase):
    """kernel_files without a Triton cache entry: the metadata comes from the
    StaticallyLaunchedCudaKernel (torch/_inductor/runtime/static_triton_launcher.py)."""

    def test_pytorch_215_keeps_sizes(self):
        k = types.SimpleNamespace(name="k", num_warps=4, shared=0, global_scratch_size=256,
                                  profile_scratch_size=0, has_global_scratch=True, has_profile_scratch=True)
        meta, cubin, ptx = kernels.kernel_files(types.SimpleNamespace(cache_hash=None),
                                                types.SimpleNamespace(kernel=k))
        self.assertEqual(meta, {"name": "k", "num_warps": 4, "shared": 0, "global_scratch_size": 256,
                                "profile_scratch_size": 0})
        self.assertEqual((cubin, ptx), (None, None))

    def test_pytorch_212_keeps_flags(self):
        k = types.SimpleNamespace(name="k", num_warps=4, shared=0, has_global_scratch=True,
                                  has_profile_scratch=True)
        meta, _, _ = kernels.kernel_files(types.SimpleNamespace(cache_hash=None), types.SimpleNamespace(kernel=k))
        self.assertEqual(meta["global_scratch_size"], 0)
        self.assertEqual(meta["profile_scratch_size"], 0)
        got = kernels.launch_fields("k", meta, {"num_stages": 1}, running="3.7.1")
        self.assertEqual(got, {"num_warps": 4, "num_stages": 1, "shared_mem": 0, "global_scratch": 0,
                               "profile_scratch": 0, "mangled_name": "k"})


def _inductor_meta(be):
    """inductor_meta that gives back the recorded `grid_type` (kernels.grid_json's inverse)."""
    g = be["grid_type"]
    im = {"grid_type": g["type"]}
    if g["type"] == "Grid2DWithYZOverflow":
        im["max_y_grid"] = g["max_y_grid"]
    if g["type"] == "PrecomputedGrid":
        im["precomputed_grids"] = [{"config": e["config"], "python": [str(x) for x in e["grid"]]}
                                   for e in g["grids"]]
    if be.get("extra_launcher_args"):
        im["extra_launcher_args"] = list(be["extra_launcher_args"])
    return im


class CommittedBundles(unittest.TestCase):
    """Triton 3.6 output stays byte-identical: every committed kernel's recorded
    metadata maps to its recorded fields, and `fill_kernels` over a Triton cache made
    from the bundle writes the same kernels/<kernel>.json and program.json backend."""

    def kernel_files(self):
        files = sorted(glob.glob(os.path.join(BUNDLES, "*", "kernels", "*.json")))
        if not files:
            self.skipTest("no committed bundles")
        return files

    def test_recorded_fields(self):
        for path in self.kernel_files():
            with open(path) as f:
                k = json.load(f)
            meta = k["triton_metadata"]
            with self.subTest(kernel=path):
                got = kernels.launch_fields(k["kernel"], meta, None, k["signature"])
                want = {key: k[key] for key in ("num_warps", "num_stages", "shared_mem", "global_scratch",
                                                "profile_scratch", "mangled_name") if k.get(key) is not None}
                self.assertEqual(got, want)

    def test_fill_kernels_reproduces_bundles(self):
        self.kernel_files()
        tmp = tempfile.mkdtemp(prefix="wrapir-triton-versions-")
        try:
            for bdir in sorted(glob.glob(os.path.join(BUNDLES, "*"))):
                if os.path.isdir(os.path.join(bdir, "kernels")):
                    with self.subTest(bundle=os.path.basename(bdir)):
                        self.check_bundle(bdir, os.path.join(tmp, os.path.basename(bdir)))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def check_bundle(self, bdir, tmp):
        with open(os.path.join(bdir, "program.json")) as f:
            program = json.load(f)
        cap, module, want_backend = {}, types.SimpleNamespace(), {}
        for name, kv in program["kernels"].items():
            be = kv["backend"]
            if be.get("kind", "triton") != "triton":
                continue
            with open(os.path.join(bdir, "kernels", f"{name}.json")) as f:
                rec = json.load(f)
            cache = os.path.join(tmp, "cache", name)
            os.makedirs(cache)
            mangled = rec["mangled_name"]
            shutil.copy(os.path.join(bdir, rec["cubin"]), os.path.join(cache, f"{mangled}.cubin"))
            if rec.get("ptx"):
                shutil.copy(os.path.join(bdir, rec["ptx"]), os.path.join(cache, f"{mangled}.ptx"))
            with open(os.path.join(cache, f"{mangled}.json"), "w") as f:
                json.dump(rec["triton_metadata"], f)
            with open(os.path.join(cache, f"__grp__{mangled}.json"), "w") as f:
                json.dump({"child_paths": {}}, f)
            cfg = types.SimpleNamespace(kwargs=dict(rec["config"]), num_warps=rec["num_warps"],
                                        num_stages=rec["num_stages"])
            launcher = types.SimpleNamespace(config=cfg, cache_hash=None, n_regs=rec["n_regs"],
                                             n_spills=rec["n_spills"], shared=rec["shared_mem"])
            compiled = types.SimpleNamespace(config=cfg, kernel=types.SimpleNamespace(
                cubin_path=os.path.join(cache, f"{mangled}.cubin")))
            tuner = types.SimpleNamespace(
                launchers=[launcher], compile_results=[compiled],
                triton_meta={"signature": dict(rec["signature"]), "constants": dict(rec["constants"])},
                inductor_meta=_inductor_meta(be),
                heuristic_type="HeuristicType.USER_AUTOTUNE" if be.get("user_defined") else "HeuristicType.POINTWISE")
            setattr(module, name, tuner)
            cap[name] = {"_kind": "triton", "source": ""}
            want_backend[name] = be
        errors = []
        kdir = os.path.join(tmp, "kernels")
        out = kernels.fill_kernels(cap, [module], kdir, errors)
        self.assertEqual(errors, [])
        for name, be in want_backend.items():
            self.assertEqual(out[name]["backend"], be, name)
            for ext in ("json", "cubin", "ptx"):
                got, want = os.path.join(kdir, f"{name}.{ext}"), os.path.join(bdir, "kernels", f"{name}.{ext}")
                if os.path.exists(want):
                    with open(got, "rb") as f1, open(want, "rb") as f2:
                        self.assertEqual(f1.read(), f2.read(), f"{name}.{ext}")


if __name__ == "__main__":
    unittest.main()
