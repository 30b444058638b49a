"""Unit tests of schema.py, the structural-schema checks (python3 -m unittest test_schema)."""

import copy
import json
import os
import unittest

import schema as s

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDINGS = os.path.join(HERE, "recordings")

# The schema of the recorded widgets CRD (recordings/22 and 23).
WIDGET = {"type": "object", "properties": {
    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
    "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}

QUANTITY = {"anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                       r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
            "x-kubernetes-int-or-string": True}


def obj(props, **kw):
    return dict(type="object", properties=props, **kw)


def spec_of(props, **kw):
    return obj({"spec": obj(props, **kw)})


def read_recording(name):
    """(request body, response body) of one recorded exchange."""
    with open(os.path.join(RECORDINGS, name), encoding="utf-8") as f:
        text = f.read()
    request, response = text.split("### response", 1)
    req_body = request.split("\n\n", 1)[1].strip()
    resp_body = response.split("\n\n", 1)[1].strip()
    return json.loads(req_body), json.loads(resp_body)


class Recordings(unittest.TestCase):
    """The wording checked against what kube-apiserver 1.32 answered."""

    def setUp(self):
        if not os.path.isdir(RECORDINGS):
            self.fail("no recordings at %s (tests/apiserver/record.py makes them)" % RECORDINGS)

    def test_type_error_matches_recording(self):
        body, status = read_recording("22-cr-schema-invalid.txt")
        out, causes, unknown = s.admit(WIDGET, body)
        self.assertEqual(unknown, [])
        self.assertEqual(causes, status["details"]["causes"])

    def test_strict_unknown_field_matches_recording(self):
        body, status = read_recording("23-cr-unknown-field-strict.txt")
        unknown = s.unknown_fields(WIDGET, body)
        self.assertEqual(unknown, ["spec.colour"])
        self.assertIn('unknown field "%s"' % unknown[0], status["message"])

    def test_valid_create_passes_unchanged(self):
        body, _ = read_recording("21-cr-create.txt")
        out, causes, unknown = s.admit(WIDGET, body)
        self.assertEqual((causes, unknown), ([], []))
        # Dropping status on create is the status subresource's rule, not the schema's.
        self.assertEqual(out, body)

    def test_recorded_pod_causes_have_the_cause_shape(self):
        _, status = read_recording("08-pod-invalid.txt")
        for c in status["details"]["causes"]:
            self.assertEqual(set(c), {"reason", "message", "field"})


class Types(unittest.TestCase):
    def check(self, schema, value, actual=None):
        """No cause, or exactly the type cause naming `actual` as the value's type."""
        causes = s.validate(spec_of({"x": schema}), {"spec": {"x": value}})
        if actual is None:
            self.assertEqual(causes, [])
            return
        self.assertEqual(causes, [{
            "reason": "FieldValueTypeInvalid", "field": "spec.x",
            "message": 'Invalid value: "%s": spec.x in body must be of type %s: "%s"' % (
                actual, schema["type"], actual)}])

    def test_each_type(self):
        self.check({"type": "string"}, "a")
        self.check({"type": "string"}, 1, "integer")
        self.check({"type": "integer"}, 3)
        self.check({"type": "integer"}, "3", "string")
        self.check({"type": "boolean"}, True)
        self.check({"type": "boolean"}, "true", "string")
        self.check({"type": "array", "items": {"type": "string"}}, [])
        self.check({"type": "array", "items": {"type": "string"}}, {}, "object")
        self.check({"type": "object"}, {})
        self.check({"type": "object"}, [], "array")
        self.check({"type": "number"}, 1.5)

    def test_integer_accepts_whole_floats_only(self):
        self.check({"type": "integer"}, 3.0)
        self.check({"type": "integer"}, 3.5, "number")

    def test_number_accepts_integers(self):
        self.check({"type": "number"}, 3)

    def test_booleans_are_not_integers(self):
        self.check({"type": "integer"}, True, "boolean")
        self.check({"type": "boolean"}, 1, "integer")

    def test_null_needs_nullable(self):
        self.check({"type": "integer", "nullable": True}, None)
        self.check({"type": "integer"}, None, "null")

    def test_message_names_expected_and_actual(self):
        causes = s.validate(spec_of({"x": {"type": "integer"}}), {"spec": {"x": "big"}})
        self.assertEqual(causes, [{
            "reason": "FieldValueTypeInvalid",
            "message": 'Invalid value: "string": spec.x in body must be of type integer: "string"',
            "field": "spec.x"}])

    def test_wrong_type_stops_descent(self):
        schema = spec_of({"x": obj({"y": {"type": "string"}}, required=["y"])})
        causes = s.validate(schema, {"spec": {"x": "flat"}})
        self.assertEqual([c["field"] for c in causes], ["spec.x"])


class IntOrString(unittest.TestCase):
    def causes(self, value, schema=QUANTITY):
        return s.validate(spec_of({"q": schema}), {"spec": {"q": value}})

    def test_accepts_integers_and_strings(self):
        for v in (2, "2", "500m", "1Gi", "1e3", "0.5", "+1", 2.0):
            self.assertEqual(self.causes(v), [], v)

    def test_refuses_other_types(self):
        for v, t in (({"a": 1}, "object"), (True, "boolean"), ([1], "array"), (1.5, "number")):
            causes = self.causes(v)
            self.assertEqual(len(causes), 1, v)
            self.assertEqual(causes[0]["reason"], "FieldValueTypeInvalid")
            self.assertIn("must be of type integer,string: \"%s\"" % t, causes[0]["message"])

    def test_pattern_applies_to_strings(self):
        causes = self.causes("lots")
        self.assertEqual(len(causes), 1)
        self.assertEqual(causes[0]["reason"], "FieldValueInvalid")
        self.assertTrue(causes[0]["message"].startswith(
            'Invalid value: "lots": spec.q in body should match \'^'))

    def test_legacy_format_int_or_string(self):
        schema = {"type": "string", "format": "int-or-string"}
        self.assertEqual(self.causes(8080, schema), [])
        self.assertEqual(self.causes("http", schema), [])

    def test_general_any_of(self):
        schema = {"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}
        self.assertEqual(self.causes({"a": 1}, schema), [])
        causes = self.causes({"c": 1}, schema)
        self.assertEqual(len(causes), 1)
        self.assertIn("must validate at least one schema (anyOf)", causes[0]["message"])


class Values(unittest.TestCase):
    def one(self, schema, value):
        causes = s.validate(spec_of({"x": schema}), {"spec": {"x": value}})
        self.assertEqual(len(causes), 1, causes)
        return causes[0]

    def ok(self, schema, value):
        self.assertEqual(s.validate(spec_of({"x": schema}), {"spec": {"x": value}}), [])

    def test_enum(self):
        schema = {"type": "string", "enum": ["OnFailure", "Never"]}
        self.ok(schema, "Never")
        self.assertEqual(self.one(schema, "Sometimes"), {
            "reason": "FieldValueNotSupported", "field": "spec.x",
            "message": 'Unsupported value: "Sometimes": supported values: "OnFailure", "Never"'})

    def test_enum_compares_json_values(self):
        schema = {"type": "integer", "enum": [1, 2]}
        self.ok(schema, 1)
        self.ok(schema, 2.0)
        c = self.one(schema, 3)
        self.assertEqual(c["message"], "Unsupported value: 3: supported values: 1, 2")
        self.assertEqual(self.one({"enum": [1]}, True)["reason"], "FieldValueNotSupported")

    def test_minimum_and_maximum(self):
        schema = {"type": "integer", "minimum": 1, "maximum": 255}
        self.ok(schema, 1)
        self.ok(schema, 255)
        self.assertEqual(self.one(schema, 0), {
            "reason": "FieldValueInvalid", "field": "spec.x",
            "message": "Invalid value: 0: spec.x in body should be greater than or equal to 1"})
        self.assertEqual(self.one(schema, 256)["message"],
                         "Invalid value: 256: spec.x in body should be less than or equal to 255")

    def test_exclusive_bounds(self):
        schema = {"type": "number", "minimum": 0, "exclusiveMinimum": True,
                  "maximum": 1, "exclusiveMaximum": True}
        self.ok(schema, 0.5)
        self.assertIn("should be greater than 0", self.one(schema, 0)["message"])
        self.assertIn("should be less than 1", self.one(schema, 1)["message"])

    def test_string_lengths(self):
        schema = {"type": "string", "minLength": 1, "maxLength": 15}
        self.ok(schema, "eth0")
        self.ok(schema, "é" * 15)  # characters, not bytes
        self.assertEqual(self.one(schema, "x" * 16), {
            "reason": "FieldValueTooLong", "field": "spec.x",
            "message": "Too long: may not be more than 15 bytes"})
        self.assertEqual(self.one(schema, "")["message"],
                         'Invalid value: "": spec.x in body should be at least 1 chars long')

    def test_pattern(self):
        schema = {"type": "string", "pattern": "^/"}
        self.ok(schema, "/root/.ssh")
        self.assertEqual(self.one(schema, ".ssh")["message"],
                         'Invalid value: ".ssh": spec.x in body should match \'^/\'')

    def test_date_time(self):
        schema = {"type": "string", "format": "date-time"}
        self.ok(schema, "2026-11-21T12:57:09Z")
        self.ok(schema, "2026-11-21T12:57:09.123+01:00")
        self.assertEqual(self.one(schema, "yesterday")["reason"], "FieldValueTypeInvalid")

    def test_array_lengths(self):
        schema = {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}
        self.ok(schema, [1, 2])
        self.assertEqual(self.one(schema, [1, 2, 3]), {
            "reason": "FieldValueTooMany", "field": "spec.x",
            "message": "Too many: 3: must have at most 2 items"})
        self.assertIn("should have at least 1 items", self.one(schema, [])["message"])

    def test_items_are_indexed(self):
        schema = {"type": "array", "items": {"type": "integer"}}
        self.assertEqual(self.one(schema, [1, "2"])["field"], "spec.x[1]")


class Objects(unittest.TestCase):
    def test_required(self):
        schema = spec_of({"c": {"type": "array", "items": obj(
            {"name": {"type": "string"}}, required=["name"])}})
        causes = s.validate(schema, {"spec": {"c": [{"name": "a"}, {"image": "x"}]}})
        self.assertEqual(causes, [{"reason": "FieldValueRequired", "message": "Required value",
                                   "field": "spec.c[1].name"}])

    def test_required_at_root(self):
        causes = s.validate(obj({"spec": obj({})}, required=["spec"]), {"kind": "X"})
        self.assertEqual([c["field"] for c in causes], ["spec"])

    def test_map_values_are_validated_with_dotted_keys(self):
        schema = spec_of({"limits": {"type": "object", "additionalProperties": QUANTITY}})
        causes = s.validate(schema, {"spec": {"limits": {"cpu": "1", "nvidia.com/gpu": {}}}})
        self.assertEqual([c["field"] for c in causes], ["spec.limits.nvidia.com/gpu"])

    def test_preserved_object_keeps_checking_known_fields(self):
        schema = spec_of({"o": obj({"n": {"type": "integer"}},
                                   **{"x-kubernetes-preserve-unknown-fields": True})})
        self.assertEqual(s.validate(schema, {"spec": {"o": {"n": 1, "other": {"a": []}}}}), [])
        self.assertEqual(len(s.validate(schema, {"spec": {"o": {"n": "1"}}})), 1)

    def test_root_metadata_is_the_servers_business(self):
        schema = obj({"metadata": {"type": "object"}, "spec": obj({})})
        body = {"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "x", "labels": {"a": "b"}},
                "spec": {}}
        self.assertEqual(s.validate(schema, body), [])
        self.assertEqual(s.unknown_fields(schema, body), [])
        self.assertEqual(s.prune(schema, body), body)

    def test_min_and_max_properties(self):
        schema = spec_of({"m": {"type": "object", "additionalProperties": {"type": "string"},
                                "maxProperties": 1, "minProperties": 1}})
        self.assertEqual(s.validate(schema, {"spec": {"m": {"a": "1"}}}), [])
        self.assertEqual(s.validate(schema, {"spec": {"m": {"a": "1", "b": "2"}}})[0]["reason"],
                         "FieldValueTooMany")
        self.assertEqual(s.validate(schema, {"spec": {"m": {}}})[0]["reason"], "FieldValueInvalid")


class ListTypes(unittest.TestCase):
    PORTS = {"type": "array", "x-kubernetes-list-type": "map",
             "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
             "items": obj({"containerPort": {"type": "integer"},
                           "protocol": {"type": "string", "default": "TCP"}},
                          required=["containerPort"])}

    def test_list_map_duplicates(self):
        schema = spec_of({"env": {"type": "array", "x-kubernetes-list-type": "map",
                                  "x-kubernetes-list-map-keys": ["name"],
                                  "items": obj({"name": {"type": "string"}}, required=["name"])}})
        causes = s.validate(schema, {"spec": {"env": [{"name": "A"}, {"name": "B"}, {"name": "A"}]}})
        self.assertEqual(causes, [{"reason": "FieldValueDuplicate", "field": "spec.env[2]",
                                   "message": 'Duplicate value: map[string]interface {}{"name":"A"}'}])

    def test_list_map_keys_use_defaults(self):
        schema = spec_of({"ports": self.PORTS})
        body = {"spec": {"ports": [{"containerPort": 22}, {"containerPort": 22, "protocol": "TCP"},
                                   {"containerPort": 22, "protocol": "UDP"}]}}
        causes = s.validate(schema, body)
        self.assertEqual([c["field"] for c in causes], ["spec.ports[1]"])
        self.assertEqual(causes[0]["message"], 'Duplicate value: map[string]interface {}'
                         '{"containerPort":22, "protocol":"TCP"}')

    def test_list_set_duplicates(self):
        schema = spec_of({"s": {"type": "array", "items": {"type": "string"},
                                "x-kubernetes-list-type": "set"}})
        causes = s.validate(schema, {"spec": {"s": ["a", "b", "a"]}})
        self.assertEqual(causes, [{"reason": "FieldValueDuplicate", "field": "spec.s[2]",
                                   "message": 'Duplicate value: "a"'}])


class Pruning(unittest.TestCase):
    SCHEMA = obj({
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": obj({
            "known": {"type": "string"},
            "list": {"type": "array", "items": obj({"a": {"type": "integer"}})},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "free": {"type": "object", "additionalProperties": True},
        }),
    })
    BODY = {"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n", "weird": 1},
            "spec": {"known": "k", "colour": "red",
                     "list": [{"a": 1, "b": 2}, {"a": 2}],
                     "labels": {"x": "y"}, "open": {"anything": {"goes": [1]}},
                     "free": {"z": [1]}},
            "extra": True}

    def test_unknown_fields_in_document_order(self):
        self.assertEqual(s.unknown_fields(self.SCHEMA, self.BODY),
                         ["spec.colour", "spec.list[0].b", "extra"])

    def test_prune_drops_exactly_those(self):
        before = copy.deepcopy(self.BODY)
        out = s.prune(self.SCHEMA, self.BODY)
        self.assertEqual(self.BODY, before)  # the input is not changed
        expected = copy.deepcopy(self.BODY)
        del expected["spec"]["colour"], expected["spec"]["list"][0]["b"], expected["extra"]
        self.assertEqual(out, expected)
        self.assertEqual(s.unknown_fields(self.SCHEMA, out), [])

    def test_object_without_properties_is_emptied(self):
        schema = spec_of({"o": {"type": "object"}})
        self.assertEqual(s.prune(schema, {"spec": {"o": {"a": 1}}}), {"spec": {"o": {}}})
        self.assertEqual(s.unknown_fields(schema, {"spec": {"o": {"a": 1}}}), ["spec.o.a"])

    def test_wrong_types_are_left_for_validation(self):
        out = s.prune(self.SCHEMA, {"spec": {"list": "x", "known": {"a": 1}}})
        self.assertEqual(out, {"spec": {"list": "x", "known": {"a": 1}}})


class Defaults(unittest.TestCase):
    SCHEMA = spec_of({
        "slots": {"type": "integer", "default": 1},
        "net": obj({"transport": {"type": "string", "default": "Auto"},
                    "rdma": obj({"devicePath": {"type": "string", "default": "/dev/infiniband"}}),
                    "gid": {"type": "integer", "nullable": True, "default": 3}},
                   default={}),
        "name": {"type": "string"},
        "items": {"type": "array", "items": obj({"protocol": {"type": "string", "default": "TCP"}})},
        "map": {"type": "object", "additionalProperties": obj({"n": {"type": "integer", "default": 0}})},
    })

    def test_missing_fields_get_defaults_top_down(self):
        out = s.apply_defaults(self.SCHEMA, {"spec": {}})
        self.assertEqual(out, {"spec": {"slots": 1, "net": {"transport": "Auto", "gid": 3}}})

    def test_present_values_stay(self):
        body = {"spec": {"slots": 4, "net": {"transport": "RDMA", "rdma": {}}}}
        out = s.apply_defaults(self.SCHEMA, body)
        self.assertEqual(out["spec"]["slots"], 4)
        self.assertEqual(out["spec"]["net"], {"transport": "RDMA", "gid": 3,
                                              "rdma": {"devicePath": "/dev/infiniband"}})
        self.assertEqual(body, {"spec": {"slots": 4, "net": {"transport": "RDMA", "rdma": {}}}})

    def test_nulls(self):
        out = s.apply_defaults(self.SCHEMA, {"spec": {"slots": None, "name": None,
                                                      "net": {"gid": None}}})
        # not nullable: dropped, then defaulted if there is a default; nullable: kept
        self.assertEqual(out, {"spec": {"slots": 1, "net": {"gid": None, "transport": "Auto"}}})

    def test_items_and_map_values(self):
        out = s.apply_defaults(self.SCHEMA, {"spec": {"items": [{}, {"protocol": "UDP"}],
                                                      "map": {"a": {}}}})
        self.assertEqual(out["spec"]["items"], [{"protocol": "TCP"}, {"protocol": "UDP"}])
        self.assertEqual(out["spec"]["map"], {"a": {"n": 0}})

    def test_root_metadata_untouched(self):
        schema = obj({"metadata": obj({"name": {"type": "string", "default": "x"}})})
        self.assertEqual(s.apply_defaults(schema, {"metadata": {}}), {"metadata": {}})

    def test_admit_runs_the_three_steps(self):
        out, causes, unknown = s.admit(self.SCHEMA, {"spec": {"slots": "2", "zzz": 1}})
        self.assertEqual(unknown, ["spec.zzz"])
        self.assertNotIn("zzz", out["spec"])
        self.assertEqual([c["field"] for c in causes], ["spec.slots"])


class Rules(unittest.TestCase):
    SCHEMA = obj({
        "spec": obj({
            "a": {"type": "integer", "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "a is immutable"}]},
            "b": {"type": "array", "items": obj({"c": {"type": "string"}}, **{
                "x-kubernetes-validations": [{"rule": "size(self.c) < 10", "message": "short"}]})},
        }),
        "status": obj({"done": {"type": "boolean"}}),
    }, **{"x-kubernetes-validations": [
        {"rule": "has(oldSelf.status) && oldSelf.status.done || self.spec.a == oldSelf.spec.a",
         "message": "frozen", "fieldPath": ".spec.a"}]})

    def test_validation_rules_lists_every_rule_with_its_place(self):
        rules = s.validation_rules(self.SCHEMA)
        self.assertEqual([(r["path"], r["transition"]) for r in rules],
                         [("", True), ("spec.a", True), ("spec.b[*]", False)])
        self.assertEqual(rules[0]["fieldPath"], ".spec.a")

    def test_transition_rules_are_those_with_old_self(self):
        self.assertEqual([r["message"] for r in s.transition_rules(self.SCHEMA)],
                         ["frozen", "a is immutable"])

    def test_rules_are_not_evaluated(self):
        self.assertEqual(s.validate(self.SCHEMA, {"spec": {"a": 1, "b": [{"c": "x" * 20}]}}), [])


class Structural(unittest.TestCase):
    def test_a_good_schema(self):
        self.assertEqual(s.structural_problems(Rules.SCHEMA), [])
        self.assertEqual(s.structural_problems(Defaults.SCHEMA), [])
        self.assertEqual(s.structural_problems(spec_of({"ports": ListTypes.PORTS})), [])
        self.assertEqual(s.structural_problems(spec_of({"q": QUANTITY})), [])

    def problems(self, props, **kw):
        return s.structural_problems(spec_of(props, **kw))

    def test_missing_type(self):
        self.assertIn("spec.x: type is required", self.problems({"x": {"description": "d"}}))
        self.assertEqual(self.problems({"x": {"x-kubernetes-preserve-unknown-fields": True}}), [])

    def test_properties_with_additional_properties(self):
        p = self.problems({"x": {"type": "object", "properties": {},
                                 "additionalProperties": {"type": "string"}}})
        self.assertEqual(p, ["spec.x: properties and additionalProperties are mutually exclusive"])

    def test_list_map_key_must_be_required_or_defaulted(self):
        ports = copy.deepcopy(ListTypes.PORTS)
        del ports["items"]["properties"]["protocol"]["default"]
        self.assertEqual(self.problems({"ports": ports}),
                         ["spec.ports: list map key protocol must be required or have a default"])

    def test_invalid_default(self):
        p = self.problems({"n": {"type": "integer", "minimum": 1, "default": 0}})
        self.assertEqual(len(p), 1)
        self.assertIn("default 0 is invalid", p[0])
        p = self.problems({"o": obj({"a": {"type": "string"}}, default={"b": 1})})
        self.assertIn("holds fields the schema does not know", p[0])

    def test_required_must_be_a_property(self):
        self.assertEqual(self.problems({}, required=["nope"]),
                         ["spec: required field nope is not a property"])

    def test_rules_must_name_existing_fields(self):
        schema = copy.deepcopy(Rules.SCHEMA)
        schema["x-kubernetes-validations"][0]["rule"] = "self.spec.aa == oldSelf.spec.a"
        p = s.structural_problems(schema)
        self.assertEqual(len(p), 1)
        self.assertIn("names self.spec.aa", p[0])
        schema = copy.deepcopy(Rules.SCHEMA)
        schema["x-kubernetes-validations"][0]["fieldPath"] = ".spec.zz"
        self.assertIn("fieldPath '.spec.zz' does not name a field", s.structural_problems(schema)[0])

    def test_rule_parentheses_and_message(self):
        p = self.problems({"a": {"type": "integer", "x-kubernetes-validations": [
            {"rule": "(self == oldSelf"}]}})
        self.assertEqual(len(p), 2)

    def test_string_literals_in_rules_are_not_fields(self):
        self.assertEqual(self.problems({"a": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self != 'self.nothing' && self.startsWith('/')", "message": "m"}]}}), [])

    def test_int_or_string_must_not_have_a_type(self):
        q = dict(QUANTITY, type="string")
        self.assertIn("spec.q: x-kubernetes-int-or-string must not have a type",
                      self.problems({"q": q}))

    def test_root_metadata_restrictions(self):
        schema = obj({"metadata": obj({"labels": {"type": "object"}})})
        self.assertIn("metadata: only name and generateName may be restricted",
                      s.structural_problems(schema))

    def test_crd_version_schema(self):
        crd = {"metadata": {"name": "w"}, "spec": {"versions": [
            {"name": "v1", "schema": {"openAPIV3Schema": WIDGET}}]}}
        self.assertIs(s.crd_version_schema(crd, "v1"), WIDGET)
        with self.assertRaises(KeyError):
            s.crd_version_schema(crd, "v2")


if __name__ == "__main__":
    unittest.main()
