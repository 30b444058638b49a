"""The served resources: Kind, which holds everything the handlers need to know about one, and
render(), an object as seen through one of its versions."""

import base64
import hashlib

from errors import api_error, field_errors_text

RBAC_GROUP = "rbac.authorization.k8s.io"
CRD_GROUP = "apiextensions.k8s.io"


class Kind:
    """One served resource. Everything the handlers need to know about it is here."""

    def __init__(self, group, versions, plural, kind, singular, namespaced=True, status=False, crd=False,
                 short=(), generation=None, return_deleted=False, create_on_update=False, graceful=False,
                 fields=(), name_rule="subdomain", bookmark=None, defaulter=None, validator=None,
                 update_validator=None, schema=None, categories=(), top=("spec", "status"), subresources=None,
                 create_only=None):
        self.group = group
        self.versions = list(versions)       # served; the first is the preferred (storage) version
        self.plural = plural
        self.kind = kind
        self.singular = singular
        self.namespaced = namespaced
        self.status = status                 # has a /status subresource
        self.crd = crd                       # CRD-backed: unstructured, sorted keys, no strategic merge
        self.short = list(short)
        # generation: None (not tracked), "spec" (bumped when .spec changes), "nonmeta" (anything but
        # metadata and status): CRDs always use "nonmeta".
        self.generation = "nonmeta" if crd else generation
        self.return_deleted = return_deleted  # DELETE answers the object (else a Success Status)
        self.create_on_update = create_on_update
        self.graceful = graceful             # pods: deletionTimestamp write, then the delete
        self.fields = ("metadata.name", "metadata.namespace") + tuple(fields)
        self.name_rule = name_rule
        self.bookmark = bookmark or {}
        self.defaulter = defaulter
        self.validator = validator
        self.update_validator = update_validator
        self.schema = schema                 # openAPIV3Schema (CRDs registered with one)
        self.schemas = {}                    # version -> openAPIV3Schema, when they are known per version
        self.categories = list(categories)
        self.top = tuple(top)                # field order after kind/apiVersion/metadata
        self.unconditional_update = not crd  # CRs need metadata.resourceVersion on PUT
        self.printer_columns = {}            # version -> the CRD's additionalPrinterColumns
        # other subresources: name -> (group, version, kind, verbs), e.g. serviceaccounts/token
        self.subresources = dict(subresources or {})
        # a kind that is only ever created, never stored (SelfSubjectReview): Api method name
        self.create_only = create_only
        self.crd_object = None               # the CustomResourceDefinition it was built from

    def schema_for(self, version):
        """The structural schema a write through `version` is admitted with, or None."""
        return self.schemas.get(version, self.schema) if self.schemas else self.schema

    @property
    def skey(self):
        return (self.group, self.plural)

    def gv(self, version):
        return "%s/%s" % (self.group, version) if self.group else version

    @property
    def qualified(self):                      # "pods", "jobs.batch", "mpijobs.kubeflow.org"
        return self.plural + ("." + self.group if self.group else "")

    @property
    def qualified_kind(self):                 # "Pod", "Job.batch", "MPIJob.kubeflow.org"
        return self.kind + ("." + self.group if self.group else "")

    def details(self, name, use_kind=False):
        d = {"name": name}
        if self.group:
            d["group"] = self.group
        d["kind"] = self.kind if use_kind else self.plural
        return d

    def not_found(self, name):
        return api_error(404, "NotFound", '%s "%s" not found' % (self.qualified, name), self.details(name))

    def already_exists(self, name):
        return api_error(409, "AlreadyExists", '%s "%s" already exists' % (self.qualified, name),
                         self.details(name))

    def conflict(self, name, why="the object has been modified; please apply your changes to the latest "
                                 "version and try again"):
        return api_error(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s' % (
            self.qualified, name, why), self.details(name))

    def invalid(self, name, errors):
        details = self.details(name, use_kind=True)
        details["causes"] = [e.cause() for e in errors]
        return api_error(422, "Invalid", '%s "%s" is invalid: %s' % (self.qualified_kind, name,
                                                                      field_errors_text(errors)), details)

    def storage_version_hash(self, version):
        h = hashlib.sha256(("%s/%s/%s" % (self.group, version, self.kind)).encode()).digest()[:8]
        return base64.b64encode(h).decode()


def render(kind, obj, version, in_list=False):
    """The object as seen through a version (and, for built-in lists, without kind/apiVersion)."""
    if obj is None:
        return None
    gv = kind.gv(version)
    if in_list and not kind.crd:
        return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
    if obj.get("apiVersion") == gv:
        return obj
    out = dict(obj)
    out["apiVersion"] = gv
    return out
