"""Unit tests of the SDK's pure helpers, in plain Python (no component):
python3 -m unittest discover -s plugins/sdk-python/tests
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import wasmprov_plugin as sdk  # noqa: E402
from wasmprov_plugin import path, source  # noqa: E402


class PathTest(unittest.TestCase):
    def test_normalizes_absolute_paths(self):
        self.assertEqual(path.normalize_abs("/srv/x/"), "/srv/x")
        self.assertEqual(path.normalize_abs("/"), "/")
        self.assertEqual(path.normalize_abs("///"), "/")
        for bad in ["relative", "", "/a/../b", "/a/./b", "/a//b", "/a\nb", "/.."]:
            with self.assertRaises(ValueError, msg=bad):
                path.normalize_abs(bad)

    def test_joins_one_safe_component_only(self):
        self.assertEqual(path.join("/volumes", "pvc-1"), "/volumes/pvc-1")
        self.assertEqual(path.join("/", "pvc-1"), "/pvc-1")
        for bad in ["", ".", "..", "a/b", "a\x00b", "x" * 256]:
            with self.assertRaises(ValueError, msg=bad) as caught:
                path.join("/volumes", bad)
            self.assertIn("is not a single safe file name", str(caught.exception))

    def test_pv_names_are_dns_subdomains(self):
        path.check_pv_name("pvc-1.a")
        for bad in ["", "PVC", "-a", "a-", "a/b", "..", "a" * 254]:
            with self.assertRaises(ValueError, msg=bad):
                path.check_pv_name(bad)

    def test_sanitizes_anything_into_components(self):
        self.assertEqual(path.sanitize_component("apps/data:1"), "apps-data-1")
        self.assertEqual(path.sanitize_component("..hidden"), "hidden")
        self.assertIsNone(path.sanitize_component("///"))
        self.assertIsNone(path.sanitize_component(".."))
        self.assertEqual(path.sanitize_relative("ns/../name/./x"), ["ns", "name", "x"])


class ParamsTest(unittest.TestCase):
    def params(self, **pairs):
        return sdk.Params("demo", list(pairs.items()))

    def test_refuses_unknown_parameters_by_name(self):
        self.params(hostRoot="/a").reject_unknown(["hostRoot"])
        with self.assertRaises(sdk.InvalidArgument) as caught:
            self.params(hostRoot="/a", hostroot="/b", zeta="1").reject_unknown(["hostRoot"])
        self.assertEqual(
            str(caught.exception),
            'unknown class parameters "hostroot", "zeta": the demo plugin accepts only '
            '"hostRoot" (parameter names are case-sensitive)')

    def test_required_and_optional(self):
        self.assertEqual(self.params(server="a").required("server", "an address"), "a")
        for params in [self.params(), self.params(server="")]:
            with self.assertRaises(sdk.ParamError) as caught:
                params.required("server", "an address, e.g. 10.0.0.5")
            self.assertEqual(
                str(caught.exception),
                'missing class parameter "server": the demo plugin needs it; set it to an '
                'address, e.g. 10.0.0.5')
        self.assertEqual(self.params().optional("mode", "delete"), "delete")

    def test_typed_values_say_what_is_accepted(self):
        self.assertTrue(self.params(archive="true").bool("archive", False))
        self.assertFalse(self.params().bool("archive", False))
        with self.assertRaises(sdk.ParamError) as caught:
            self.params(archive="yes").bool("archive", False)
        self.assertEqual(str(caught.exception),
                         'class parameter "archive" is "yes": it must be "true" or "false"')
        self.assertEqual(self.params(mode="archive").one_of("mode", ["delete", "archive"]),
                         "archive")
        with self.assertRaises(sdk.ParamError) as caught:
            self.params(mode="keep").one_of("mode", ["delete", "archive"], "delete")
        self.assertIn('it must be one of "delete", "archive"', str(caught.exception))
        with self.assertRaises(sdk.ParamError):
            self.params().one_of("mode", ["delete", "archive"])
        self.assertEqual(self.params(n="12").int("n", 1), 12)
        for bad in ["-1", "1.5", "x", "١"]:
            with self.assertRaises(sdk.ParamError, msg=bad):
                self.params(n=bad).int("n", 1)
        self.assertEqual(self.params(root="/v/").abs_path("root", "/d", "a path"), "/v")
        self.assertEqual(self.params().abs_path("root", "/d", "a path"), "/d")
        with self.assertRaises(sdk.ParamError) as caught:
            self.params(root="v/../x").abs_path("root", None, "a path")
        self.assertIn("it must be an absolute, normalized path", str(caught.exception))
        with self.assertRaises(sdk.ParamError) as caught:
            self.params().abs_path("root", None, "the directory of volumes")
        self.assertIn("set it to the directory of volumes", str(caught.exception))


class SourceTest(unittest.TestCase):
    def test_builds_sources_as_the_kubernetes_api_writes_them(self):
        self.assertEqual(source.host_path("/srv/x", "Directory"),
                         '{"hostPath":{"path":"/srv/x","type":"Directory"}}')
        self.assertEqual(source.host_path("/srv/x"), '{"hostPath":{"path":"/srv/x"}}')
        self.assertEqual(json.loads(source.nfs("10.0.0.5", "/e/a", True)),
                         {"nfs": {"server": "10.0.0.5", "path": "/e/a", "readOnly": True}})
        self.assertEqual(json.loads(source.local("/mnt/a", "ext4")),
                         {"local": {"path": "/mnt/a", "fsType": "ext4"}})
        self.assertEqual(json.loads(source.csi("d.example.com", "v1", attributes={"p": "f"})),
                         {"csi": {"driver": "d.example.com", "volumeHandle": "v1",
                                  "volumeAttributes": {"p": "f"}}})

    def test_reads_back_what_it_wrote(self):
        weird = '/srv/we"ird\\dir/pvc-1'
        self.assertEqual(source.host_path_of(source.host_path(weird)), weird)
        self.assertEqual(source.nfs_of(source.nfs("nfs.example", "/e/a")), ("nfs.example", "/e/a"))
        with self.assertRaises(ValueError) as caught:
            source.host_path_of(source.nfs("a", "/b"))
        self.assertIn("no hostPath.path", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            source.nfs_of("nope")
        self.assertIn("not JSON", str(caught.exception))


class AnswersTest(unittest.TestCase):
    """The base class turns the SDK's exceptions into WIT error variants;
    here the generated bindings are replaced by records of what was made."""

    def setUp(self):
        from wasmprov_plugin import _wit

        class Variant:
            def __init__(self, value):
                self.value = value

        class Types:
            pass

        for name in ["ProvisionError_" + v for v in
                     ["Failed", "InvalidArgument", "InBackground", "NoChange", "Reschedule"]] + \
                ["DeleteError_Failed", "DeleteError_Ignored"]:
            setattr(Types, name, type(name, (Variant,), {}))

        class Err(Exception):
            def __init__(self, value):
                self.value = value

        saved = (_wit.types, _wit.err)
        _wit.types, _wit.err = (lambda: Types), Err
        self.addCleanup(lambda: setattr(_wit, "types", saved[0]))
        self.addCleanup(lambda: setattr(_wit, "err", saved[1]))
        self.Err = Err

    def answer(self, hook, error):
        def raising(self, request):
            raise error

        Plugin = type("Plugin", (sdk.Plugin,), {hook: raising})
        with self.assertRaises(self.Err) as caught:
            getattr(Plugin(), hook)(None)
        variant = caught.exception.value
        return type(variant).__name__, variant.value

    def test_provision_answers_as_raised(self):
        self.assertEqual(self.answer("provision", sdk.Reschedule("full")),
                         ("ProvisionError_Reschedule", "full"))
        self.assertEqual(self.answer("provision", sdk.ParamError("bad")),
                         ("ProvisionError_InvalidArgument", "bad"))
        self.assertEqual(self.answer("provision", sdk.Ignored("not mine")),
                         ("ProvisionError_Failed", "not mine"))

    def test_delete_cannot_refuse_so_invalid_arguments_fail(self):
        self.assertEqual(self.answer("delete", sdk.Ignored("other node")),
                         ("DeleteError_Ignored", "other node"))
        self.assertEqual(self.answer("delete", sdk.InvalidArgument("no")),
                         ("DeleteError_Failed", "no"))
        self.assertEqual(
            self.answer("delete", sdk.ParamError('class parameter "root" is "x"')),
            ("DeleteError_Failed",
             'the volume\'s recorded class parameters are unusable: class parameter "root" is "x"'))

    def test_other_exceptions_are_bugs_and_are_not_hidden(self):
        def provision(self, request):
            raise KeyError("oops")

        Plugin = type("Plugin", (sdk.Plugin,), {"provision": provision})
        with self.assertRaises(KeyError):
            Plugin().provision(None)


class LogTest(unittest.TestCase):
    def test_outside_a_component_lines_go_to_stderr(self):
        import contextlib
        import io
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            sdk.log.info("made it", path="/v/pvc-1")
        self.assertEqual(err.getvalue(), "[info] made it [('path', '/v/pvc-1')]\n")


if __name__ == "__main__":
    unittest.main()
