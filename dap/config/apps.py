"""UI-facing kinds: App, Page, Form, Table, Kanban, Listing, ApprovalInbox, Dashboard.

The spec gives only sub-records (AppChrome, FormField, BlockRef, ...); the top-level specs are
designed here. References to other manifests are strings ``module/name`` (or ``name`` within the
same module) and are checked by ``validation``.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic

from dap.config.base import EntityRef, Expression, FieldName, JsonObject, Record
from dap.config.entities import FilterSpec
from dap.config.enums import AppAccess, ButtonStyle, ChromeAuth, ChromeNav, ChromeToggle, ContextSource

PageRef = str
ComponentRef = str


class AppAuth(Record):
    login_page: PageRef | None = None
    change_password_page: PageRef | None = None
    reset_password_page: PageRef | None = None
    oauth_callback_page: PageRef | None = None
    setup_page: PageRef | None = None
    chrome_auth: ComponentRef | None = None


class ChromeRegions(Record):
    topbar: str | None = None
    sidebar: str | None = None
    rightbar: str | None = None
    bottombar: str | None = None
    footer: str | None = None


class AppChrome(Record):
    auth: ChromeAuth = ChromeAuth.AUTO
    brand: ChromeToggle = ChromeToggle.AUTO
    breadcrumbs: ChromeToggle = ChromeToggle.AUTO
    footer: ChromeToggle = ChromeToggle.AUTO
    nav: ChromeNav = ChromeNav.AUTO
    theme_switcher: ChromeToggle = ChromeToggle.AUTO
    profile_route: str | None = None
    regions: ChromeRegions | None = None


class ConfirmMessages(Record):
    """AppConfirm / FormConfirm: absent = off or inherit; empty string = explicitly off."""

    create: str | None = None
    update: str | None = None
    delete: str | None = None


class AppConsume(Record):
    app: str
    service: str
    actions: tuple[str, ...] = ()


class AppInterface(Record):
    service: str
    actions: tuple[str, ...] = ()


class AppSpec(Record):
    title: str | None = None
    description: str | None = None
    access: AppAccess = AppAccess.PRIVATE
    home: PageRef | None = None
    pages: tuple[PageRef, ...] = ()
    auth: AppAuth | None = None
    chrome: AppChrome | None = None
    confirm: ConfirmMessages | None = None
    consumes: tuple[AppConsume, ...] = ()
    interfaces: tuple[AppInterface, ...] = ()
    renderer: str | None = None
    icon: str | None = None


class ContextDecl(Record):
    name: str
    source: ContextSource
    call: str | None = None
    config: str | None = None
    entity: EntityRef | None = None
    expr: Expression | None = None
    fallback: Any = None
    id: str | None = None
    params: JsonObject | None = None
    realtime: bool = False
    value: Any = None


class BlockBinds(Record):
    source: str
    param: str


class BlockRef(Record):
    id: str | None = None
    ref: str | None = None
    asset: str | None = None
    mode: Literal["view", "edit"] | None = None
    param: JsonObject | None = None
    props: JsonObject | None = None
    binds: BlockBinds | None = None


class PageSpec(Record):
    title: str | None = None
    route: str | None = None
    layout: Literal["single", "split", "grid"] = "single"
    blocks: tuple[BlockRef, ...] = ()
    context: tuple[ContextDecl, ...] = ()
    access: AppAccess | None = None


class FormField(Record):
    field: FieldName
    label: str | None = None
    help: str | None = None
    compute: Expression | None = None
    default_from: str | None = pydantic.Field(default=None, pattern=r"^\{session\.[a-z_][a-z0-9_]*\}$")
    readonly: bool = False
    hidden: bool = False


class FormAction(Record):
    action: FieldName
    label: str | None = None
    confirm: str | None = None
    style: ButtonStyle | None = None


class FormSpec(Record):
    entity: EntityRef
    title: str | None = None
    fields: tuple[FormField, ...] = ()
    actions: tuple[FormAction, ...] = ()
    confirm: ConfirmMessages | None = None


class TableColumn(Record):
    field: FieldName
    label: str | None = None
    width: int | None = pydantic.Field(default=None, gt=0)
    sortable: bool = True


class TableSpec(Record):
    entity: EntityRef
    title: str | None = None
    columns: tuple[TableColumn, ...] = ()
    filters: tuple[FilterSpec, ...] = ()
    fixed_filters: tuple[FilterSpec, ...] = ()
    sort: str | None = pydantic.Field(default=None, pattern=r"^-?[a-z][a-z0-9_]*(,-?[a-z][a-z0-9_]*)*$")
    page_size: int = pydantic.Field(default=50, ge=1, le=1000)
    form: str | None = None


class KanbanSpec(Record):
    entity: EntityRef
    title: str | None = None
    group_by: FieldName
    card_fields: tuple[FieldName, ...] = ()
    filters: tuple[FilterSpec, ...] = ()


class ListingSpec(Record):
    entity: EntityRef
    title: str | None = None
    fields: tuple[FieldName, ...] = ()
    filters: tuple[FilterSpec, ...] = ()


class ApprovalInboxSpec(Record):
    title: str | None = None
    entities: tuple[EntityRef, ...] = ()


class WidgetLayout(Record):
    """Designed: a grid cell, in columns and rows of a 12-column grid."""

    x: int = pydantic.Field(ge=0, le=11)
    y: int = pydantic.Field(ge=0)
    w: int = pydantic.Field(ge=1, le=12)
    h: int = pydantic.Field(ge=1)


class DashboardWidget(Record):
    ref: str
    layout: WidgetLayout
    config: JsonObject | None = None


class DashboardSpec(Record):
    title: str | None = None
    widgets: tuple[DashboardWidget, ...] = ()
