"""Platform kinds: Module, Service, Workspace, Environment, Datastore, Config.

Workspace keys follow the manifest convention (snake_case: ``cluster_class``), unlike the
Workspace custom resource of the operator, which follows Kubernetes' camelCase (``clusterClass``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

import pydantic

from dap.config.actions import Action
from dap.config.base import Duration, Identifier, JsonObject, Record
from dap.config.entities import ExposeConfig
from dap.config.enums import AccessPermission, ConfigKeyType, DatastoreDriver, EnvironmentMode


class Dependency(Record):
    module: Identifier
    version: str | None = None


class AiIndexDecl(Record):
    aliases: tuple[str, ...] = ()
    category: str | None = None
    features: tuple[str, ...] = ()
    integration_pattern: str | None = None
    skills_for_ai: str | None = pydantic.Field(default=None, description="untrusted text")


class ApiRESTConfig(Record):
    base_path: str | None = None
    version: str | None = None
    disable: tuple[str, ...] = ()


class ApiGRPCConfig(Record):
    enabled: bool
    package: str | None = None


class ModuleApi(Record):
    rest: ApiRESTConfig | None = None
    grpc: ApiGRPCConfig | None = None


class ModuleSpec(Record):
    title: str | None = None
    description: str | None = None
    version: str | None = None
    dependencies: tuple[Dependency, ...] = ()
    api: ModuleApi | None = None
    ai: AiIndexDecl | None = None
    components: tuple[str, ...] = ()


class ServiceSpec(Record):
    title: str | None = None
    description: str | None = None
    actions: tuple[Action, ...] = ()
    expose: tuple[ExposeConfig, ...] = ()


class CurrencySettings(Record):
    code: str = pydantic.Field(pattern=r"^[A-Z]{3}$")
    decimal_places: int | None = pydantic.Field(default=None, ge=0, le=6)
    symbol: str | None = None


class AuthSettings(Record):
    providers: dict[str, JsonObject] = pydantic.Field(default_factory=dict)


CALENDAR_MONTHS = {"monthly": 1, "quarterly": 3, "yearly": 12}


class PeriodCalendar(Record):
    """A workspace's declared accounting calendar (issue 43): ``periods: {calendar: monthly, from:
    2026-01-01}``. At boot the server creates the periods from ``from`` up to the current one
    (idempotently; periods created through the API stay as they are). ``from`` must begin a period
    of the calendar: the 1st of a month, of a quarter's first month, or 1 January."""

    calendar: Literal["monthly", "quarterly", "yearly"]
    from_: dt.date = pydantic.Field(alias="from")

    @pydantic.model_validator(mode="after")
    def _starts_a_period(self) -> PeriodCalendar:
        months = CALENDAR_MONTHS[self.calendar]
        if self.from_.day != 1 or (self.from_.month - 1) % months != 0:
            first = {
                1: "the 1st of a month",
                3: "the 1st of January, April, July or October",
                12: "1 January",
            }
            raise ValueError(
                f"periods.from {self.from_.isoformat()} does not begin a {self.calendar} period: "
                f"use {first[months]} (e.g. {self.from_.year}-01-01)"
            )
        return self


class WorkspaceSpec(Record):
    title: str | None = None
    apps: tuple[str, ...] = ()
    environment: str | None = None
    cluster_class: str | None = None
    region: str | None = None
    cluster: str | None = None
    theme: JsonObject | None = None
    logo: str | None = None
    favicon: str | None = None
    currency: CurrencySettings | None = None
    auth: AuthSettings | None = None
    periods: PeriodCalendar | None = None


class EnvironmentPlane(Record):
    url: str


class EnvironmentSpec(Record):
    mode: EnvironmentMode = EnvironmentMode.PROD
    plane: EnvironmentPlane | None = None
    labels: dict[str, str] = pydantic.Field(default_factory=dict)


class DatastorePool(Record):
    max_idle: int | None = pydantic.Field(default=None, ge=0)
    max_open: int | None = pydantic.Field(default=None, ge=1)
    max_lifetime: Duration | None = None


class DatastoreConnection(Record):
    host: str | None = None
    port: int | None = pydantic.Field(default=None, ge=1, le=65535)
    database: str | None = None
    lazy: bool = False
    pool: DatastorePool | None = None
    extra: JsonObject | None = None


class DatastoreAccessFilter(Record):
    environment: str | None = None
    labels: dict[str, str] = pydantic.Field(default_factory=dict)
    workspaces: tuple[str, ...] = ()


class DatastorePermissionRule(Record):
    scope: str = pydantic.Field(pattern=r"^[a-z0-9_*]+\.[a-z0-9_*]+$")
    access: AccessPermission


class DatastorePermission(Record):
    default: AccessPermission = AccessPermission.READ_WRITE
    rules: tuple[DatastorePermissionRule, ...] = ()


class DatastoreAccess(Record):
    filter: DatastoreAccessFilter | None = None
    permission: DatastorePermission | None = None


class DatastoreSpec(Record):
    driver: DatastoreDriver
    description: str | None = None
    connection: DatastoreConnection | None = None
    access: DatastoreAccess | None = None


class ConfigKey(Record):
    type: ConfigKeyType
    default: Any = None
    public: bool = False
    secret: bool = False
    description: str | None = None


class ConfigSpec(Record):
    keys: dict[Identifier, ConfigKey] = pydantic.Field(default_factory=dict)
