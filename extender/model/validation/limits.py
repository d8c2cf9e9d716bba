"""DRA's size limits and name formats, as the API server enforces them for resource.k8s.io/v1.

Taken from the released k8s.io/api resource/v1 types (v0.37.2: the ``...MaxSize``,
``...MaxLength`` and ``ResourceSlice...`` constants) and k8s.io/apimachinery's name formats.
Kept in one place so that whatever admits objects (local mode's embedded API server) and
whatever reads them can share them.
"""

from __future__ import annotations

import re
from typing import Final

# ResourceSlice
RESOURCE_SLICE_MAX_DEVICES: Final = 128
# With device taints, counter consumption or list-valued attributes.
RESOURCE_SLICE_MAX_DEVICES_WITH_ADVANCED_FEATURES: Final = 64
RESOURCE_SLICE_MAX_COUNTER_SETS: Final = 8
RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET: Final = 32
RESOURCE_SLICE_MAX_COUNTER_CONSUMPTIONS_PER_DEVICE: Final = 2
RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_CONSUMPTION: Final = 32
RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE: Final = 32
RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE: Final = 48
DEVICE_TAINTS_MAX_LENGTH: Final = 16
DEVICE_MAX_DOMAIN_LENGTH: Final = 63
DEVICE_MAX_ID_LENGTH: Final = 32
DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH: Final = 64
DRIVER_NAME_MAX_LENGTH: Final = 63
POOL_NAME_MAX_LENGTH: Final = 253

# ResourceClaim, ResourceClaimTemplate, DeviceClass
DEVICE_REQUESTS_MAX_SIZE: Final = 32
DEVICE_CONSTRAINTS_MAX_SIZE: Final = 32
DEVICE_CONFIG_MAX_SIZE: Final = 32
DEVICE_SELECTORS_MAX_SIZE: Final = 32
FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE: Final = 8
DEVICE_DERIVED_ATTRIBUTES_MAX_SIZE: Final = 32
DEVICE_TOLERATIONS_MAX_LENGTH: Final = 16
CEL_SELECTOR_EXPRESSION_MAX_LENGTH: Final = 10 * 1024
RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE: Final = 256

# k8s.io/apimachinery/pkg/util/validation
DNS1123_LABEL_MAX_LENGTH: Final = 63
DNS1123_SUBDOMAIN_MAX_LENGTH: Final = 253
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL: Final = re.compile(rf"{_LABEL}\Z", re.ASCII)
DNS1123_SUBDOMAIN: Final = re.compile(rf"{_LABEL}(\.{_LABEL})*\Z", re.ASCII)
C_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z", re.ASCII)
# k8s.io/kubernetes pkg/apis/resource/validation: semver.org 2.0.0 for version attributes.
_NUMERIC = r"(0|[1-9]\d*)"
_PRE = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_BUILD = r"[0-9a-zA-Z-]+"
SEMVER: Final = re.compile(
    rf"{_NUMERIC}\.{_NUMERIC}\.{_NUMERIC}(-{_PRE}(\.{_PRE})*)?(\+{_BUILD}(\.{_BUILD})*)?\Z", re.ASCII
)
