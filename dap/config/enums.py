"""The enumerations of the specification's "Resources and their fields".

Each is a ``StrEnum`` so that manifests, JSON and SQL see plain strings while code gets a closed
set that mypy checks.
"""

from __future__ import annotations

from enum import StrEnum


class FieldType(StrEnum):
    STRING = "string"
    TEXT = "text"
    RICHTEXT = "richtext"
    INTEGER = "integer"
    DECIMAL = "decimal"
    MONEY = "money"
    BOOLEAN = "boolean"
    ENUM = "enum"
    DATE = "date"
    DATETIME = "datetime"
    TIME = "time"
    UUID = "uuid"
    JSON = "json"
    FILE = "file"
    ATTACHMENT = "attachment"
    RELATION = "relation"
    CHILD = "child"
    PERCENT = "percent"
    NUMBER = "number"


class Characteristic(StrEnum):
    MASTER = "master"
    TRANSACTION = "transaction"
    REFERENCE = "reference"
    SUMMARY = "summary"


class FieldClassification(StrEnum):
    PII = "pii"
    FINANCIAL = "financial"
    INTERNAL = "internal"


class AccessPermission(StrEnum):
    READ = "read"
    WRITE = "write"
    READ_WRITE = "read_write"


class DocStatus(StrEnum):
    DRAFT = "draft"
    SUBMITTED = "submitted"
    CANCELLED = "cancelled"


class ApprovalStepMode(StrEnum):
    ALL = "all"  # declared by the spec, refused at validation
    ANY = "any"
    SEQUENTIAL = "sequential"


class EventChannel(StrEnum):
    AUDIT_LOG = "audit_log"
    WEBSOCKET = "websocket"
    QUEUE = "queue"
    PUBSUB = "pubsub"
    RELIABLE_EVENT = "reliable_event"
    NOTIFICATION = "notification"
    WEBHOOK = "webhook"


class DatastoreDriver(StrEnum):
    SQLITE = "sqlite"
    POSTGRES = "postgres"
    VALKEY = "valkey"
    REDIS = "redis"
    S3 = "s3"
    GARAGE = "garage"
    MINIO = "minio"
    NATS = "nats"
    MEMORY = "memory"
    FS = "fs"


class EnvironmentMode(StrEnum):
    DEV = "dev"
    PROD = "prod"


class ProtocolType(StrEnum):
    REST = "rest"
    GRPC = "grpc"
    WS = "ws"


class AppAccess(StrEnum):
    PRIVATE = "private"
    PUBLIC = "public"


class ContextSource(StrEnum):
    SESSION = "session"
    ENTITY = "entity"
    API = "api"
    CONST = "const"
    EXPR = "expr"


class ConfigKeyType(StrEnum):
    INT = "int"
    STRING = "string"
    BOOL = "bool"
    DECIMAL = "decimal"
    JSON = "json"


class FilterOp(StrEnum):
    EQ = "eq"
    NEQ = "neq"
    GT = "gt"
    GTE = "gte"
    LT = "lt"
    LTE = "lte"
    BETWEEN = "between"
    IN = "in"
    NIN = "nin"
    LIKE = "like"
    ILIKE = "ilike"
    NULL = "null"
    NOTNULL = "notnull"


class FilterType(StrEnum):
    TEXT = "text"
    SELECT = "select"
    DATE = "date"
    DATE_RANGE = "date_range"


class FilterFrom(StrEnum):
    SESSION = "session"
    ROUTE = "route"


class ButtonStyle(StrEnum):
    PRIMARY = "primary"
    SECONDARY = "secondary"
    DANGER = "danger"


class ChromeAuth(StrEnum):
    AUTO = "auto"
    LINKS = "links"
    BUTTON = "button"
    NONE = "none"


class ChromeToggle(StrEnum):
    AUTO = "auto"
    SHOW = "show"
    HIDE = "hide"


class ChromeNav(StrEnum):
    AUTO = "auto"
    MENU = "menu"
    NONE = "none"


class DeployPhase(StrEnum):
    UP_TO_DATE = "up_to_date"
    FETCHED = "fetched"
    VERIFIED = "verified"
    LOADED = "loaded"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"


class EvidenceType(StrEnum):
    DEPLOY_STATUS = "deploy_status"
    HEALTH = "health"
    METERING = "metering"
    AUDIT_ANCHOR = "audit_anchor"
    VIOLATION = "violation"


class ChildStorage(StrEnum):
    JSONB = "jsonb"
    TABLE = "table"


class CallMode(StrEnum):
    SYNC = "sync"
    ASYNC = "async"


class NaturalKeyEntry(StrEnum):
    ENGINE = "engine"
    PERSON = "person"
    ENGINE_UNLESS_PERSON = "engine_unless_person"


class StandardAction(StrEnum):
    """Actions every entity has unless ``disabled``; ``submit``/``cancel`` exist with a lifecycle."""

    LIST = "list"
    FIND = "find"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    SUBMIT = "submit"
    CANCEL = "cancel"


REST_ACTIONS = (
    StandardAction.LIST,
    StandardAction.FIND,
    StandardAction.CREATE,
    StandardAction.UPDATE,
    StandardAction.DELETE,
)
