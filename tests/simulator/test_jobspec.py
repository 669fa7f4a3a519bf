"""The simulated cluster's jobspec reader: HCL2's native syntax decoded into the ``api.Job`` that
Nomad 1.10.5's ``POST /v1/jobs/parse`` answers (``jobspec2``), and the ``api`` package's
canonicalization.

What Nomad does, and where (hashicorp/nomad v1.10.5): ``jobspec2/parse.go``, ``types.config.go``
(the job block, the ``UndefinedVariable`` hook that keeps ``${node.unique.name}``),
``hcl_conversions.go`` (constraint, affinity, durations, ``meta``/``env`` as attributes),
``hclutil/blockattrs.go`` (a driver's ``config``), ``parse_job.go`` (``normalizeJob``), ``api/*.go``
(the structs, ``Canonicalize``); hashicorp/hcl v2.20 ``hclsyntax`` for the diagnostics' texts.

Plain sync tests: no I/O, no clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pytest

from supervisor.simulator.jobspec.canonical import canonical_api_job
from supervisor.simulator.jobspec.decode import parse_job
from supervisor.simulator.jobspec.tree import HclError

POSEIDON_TEMPLATE: Final = (
    Path(__file__).parents[1] / "fixtures" / "poseidon-template-environment-job.hcl"
).read_text()
S: Final = 1_000_000_000


def nulls(names: str) -> dict[str, Any]:
    """Go's nil pointers, slices and maps, by field name."""
    return dict.fromkeys(names.split())


# Every field of the api structs, as Go writes them when HCL set nothing (nil pointers are null).
JOB_ZERO: Final[dict[str, Any]] = nulls(
    "Region Namespace ID Name Type Priority AllAtOnce Datacenters NodePool Constraints Affinities TaskGroups "
    "Update Multiregion Spreads Periodic ParameterizedJob Reschedule Migrate Meta UI Stop ParentID "
    "DispatchIdempotencyToken Payload ConsulNamespace VaultNamespace NomadTokenID Status StatusDescription "
    "Stable Version SubmitTime CreateIndex ModifyIndex JobModifyIndex VersionTag"
) | {"Dispatched": False}
GROUP_ZERO: Final[dict[str, Any]] = nulls(
    "Name Count Constraints Affinities Tasks Spreads Volumes RestartPolicy Disconnect ReschedulePolicy "
    "EphemeralDisk Update Migrate Networks Meta Services ShutdownDelay StopAfterClientDisconnect "
    "MaxClientDisconnect Scaling Consul PreventRescheduleOnLost"
)
TASK_ZERO: Final[dict[str, Any]] = nulls(
    "Lifecycle Config Constraints Affinities Env Services Resources RestartPolicy Meta KillTimeout LogConfig "
    "Artifacts Vault Consul Templates DispatchPayload VolumeMounts ScalingPolicies Identity Identities "
    "Actions Schedule"
) | {"Name": "", "Driver": "", "User": "", "Leader": False, "ShutdownDelay": 0, "KillSignal": "", "Kind": ""}
RESOURCES_ZERO: Final[dict[str, Any]] = nulls(
    "CPU Cores MemoryMB MemoryMaxMB DiskMB Networks Devices NUMA SecretsMB IOPS"
)
NETWORK_ZERO: Final[dict[str, Any]] = {
    "Mode": "", "Device": "", "CIDR": "", "IP": "", "DNS": None, "ReservedPorts": None, "DynamicPorts": None,
    "Hostname": "", "MBits": None, "CNI": None,
}  # fmt: skip


def port(label: str, *, static: int = 0, to: int = 0) -> dict[str, Any]:
    return {"Label": label, "Value": static, "To": to, "HostNetwork": "", "IgnoreCollision": False}


POSEIDON_JOB: Final[dict[str, Any]] = JOB_ZERO | {
    "ID": "template-0",
    "Name": "template-0",
    "Type": "batch",
    "Datacenters": ["dc1"],
    "TaskGroups": [
        GROUP_ZERO
        | {
            "Name": "default-group",
            "Count": 1,
            "EphemeralDisk": {"Migrate": False, "SizeMB": 10, "Sticky": False},
            "Spreads": [{"Attribute": "${node.unique.name}", "Weight": 100, "SpreadTarget": None}],
            "RestartPolicy": {
                "Attempts": 3, "Delay": 15 * S, "Interval": 3600 * S, "Mode": "fail", "RenderTemplates": None,
            },
            "ReschedulePolicy": {
                "Unlimited": False, "Attempts": 3, "Interval": 6 * 3600 * S, "Delay": 60 * S,
                "MaxDelay": 240 * S, "DelayFunction": "exponential",
            },
            "Tasks": [
                TASK_ZERO
                | {
                    "Name": "default-task",
                    "Driver": "docker",
                    "KillTimeout": 0,
                    "KillSignal": "SIGKILL",
                    "Config": {
                        "image": "openhpi/docker_exec_phusion",
                        "command": "sleep",
                        "args": ["infinity"],
                        "network_mode": "none",
                    },
                    "LogConfig": {"MaxFiles": 1, "MaxFileSizeMB": 1, "Enabled": None, "Disabled": None},
                    "Resources": RESOURCES_ZERO | {"CPU": 40, "MemoryMB": 50},
                }
            ],
        },
        GROUP_ZERO
        | {
            "Name": "config",
            "Count": 0,
            "Meta": {"used": "false", "prewarmingPoolSize": "0"},
            "Tasks": [
                TASK_ZERO
                | {
                    "Name": "config",
                    "Driver": "exec",
                    "Config": {"command": "true"},
                    "LogConfig": {"MaxFiles": 1, "MaxFileSizeMB": 1, "Enabled": None, "Disabled": None},
                    "Resources": RESOURCES_ZERO | {"CPU": 1, "MemoryMB": 10},
                }
            ],
        },
    ],
}  # fmt: skip

OPERATOR_TEMPLATE: Final = """
# an operator's template: another datacenter, a node pool, constraints
job "template-0" {
  datacenters = ["dc-east", "dc-west"]
  node_pool   = "runners"
  type        = "batch"
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  group "default-group" {
    constraint {
      attribute = "${meta.gvisor}"
      regexp    = "^(yes|true)$"
    }
    network {
      mode = "cni/secure-bridge"
      port "http" { to = 8080 }
      port "admin" {
        static = 9000
      }
      dns {
        servers  = ["10.0.0.53"]
        searches = ["internal"]
        options  = ["ndots:2"]
      }
    }
    meta = {
      "owner.team" = "codeocean"
      retries      = 3
    }
    task "default-task" {
      driver = "docker"
      user   = "runner"
      env {
        CODEOCEAN = "true"
      }
      config {
        image   = "openhpi/co_execenv_python:3.8"
        command = "sleep"
        args    = ["infinity"]
        labels  = { team = "codeocean" } // an object literal
        mount "tmpfs" {
          target = "/tmp"
        }
        entrypoint = <<-EOT
          #!/bin/bash
          exec "$@" ${NOMAD_ALLOC_ID}
        EOT
      }
      /* memory_max lets a runner burst */
      resources {
        cpu        = 20
        memory     = 30
        memory_max = 512
      }
      affinity {
        attribute = "${node.class}"
        value     = "fast"
        weight    = -20
      }
    }
  }
}
"""


def test_poseidons_default_template_parses_to_the_api_job_nomad_answers() -> None:
    assert parse_job(POSEIDON_TEMPLATE) == POSEIDON_JOB


def test_a_template_saved_with_windows_line_ends_reads_the_same() -> None:
    assert parse_job(POSEIDON_TEMPLATE.replace("\n", "\r\n")) == POSEIDON_JOB
    job = parse_job('job "x" {\r\n  meta {\r\n    a = <<EOF\r\nhi\r\nEOF\r\n  }\r\n}\r\n')
    assert job["Meta"] == {"a": "hi\r\n"}


def test_an_operators_template_with_a_datacenter_a_node_pool_and_constraints() -> None:
    job = parse_job(OPERATOR_TEMPLATE)
    assert set(job) == set(JOB_ZERO)
    assert (job["Datacenters"], job["NodePool"], job["Type"]) == (["dc-east", "dc-west"], "runners", "batch")
    assert job["Constraints"] == [{"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="}]
    [group] = job["TaskGroups"]
    assert group["Constraints"] == [
        {"LTarget": "${meta.gvisor}", "RTarget": "^(yes|true)$", "Operand": "regexp"}
    ]
    assert group["Meta"] == {"owner.team": "codeocean", "retries": "3"}
    assert group["Networks"] == [
        NETWORK_ZERO
        | {
            "Mode": "cni/secure-bridge",
            "DNS": {"Servers": ["10.0.0.53"], "Searches": ["internal"], "Options": ["ndots:2"]},
            "DynamicPorts": [port("http", to=8080)],
            "ReservedPorts": [port("admin", static=9000)],
        }
    ]
    [task] = group["Tasks"]
    assert (task["User"], task["Env"]) == ("runner", {"CODEOCEAN": "true"})
    assert task["Config"] == {
        "image": "openhpi/co_execenv_python:3.8",
        "command": "sleep",
        "args": ["infinity"],
        "labels": [{"team": "codeocean"}],
        "mount": [{"tmpfs": [{"target": "/tmp"}]}],
        "entrypoint": '#!/bin/bash\nexec "$@" ${NOMAD_ALLOC_ID}\n',
    }
    assert task["Resources"] == RESOURCES_ZERO | {"CPU": 20, "MemoryMB": 30, "MemoryMaxMB": 512}
    assert task["Affinities"] == [
        {"LTarget": "${node.class}", "RTarget": "fast", "Operand": "=", "Weight": -20}
    ]


def test_strings_heredocs_comments_and_a_task_at_the_jobs_level() -> None:
    job = parse_job(
        'job "x" { # a comment after the brace\n'
        "  meta {\n"
        '    path = "C:\\\\dir\\t${ node.unique.id }\\u00e9"\n'
        '    literal = "$${NOMAD_TASK_DIR}" /* a comment\n over two lines */\n'
        "  }\n"
        "  // a task outside any group is a group of its own\n"
        '  task "solo" {\n'
        '    driver = "raw_exec"\n'
        "    kill_timeout = 2500000000\n"
        "    config {\n"
        "      script = <<EOF\n"
        "  keeps its indent\n"
        "EOF\n"
        "    }\n"
        "  }\n"
        "}\n"
    )
    assert job["Meta"] == {"path": "C:\\dir\t${ node.unique.id }\u00e9", "literal": "${NOMAD_TASK_DIR}"}
    [group] = job["TaskGroups"]
    assert group == GROUP_ZERO | {"Name": "solo", "Tasks": group["Tasks"]}
    assert group["Tasks"][0]["KillTimeout"] == 2_500_000_000
    assert group["Tasks"][0]["Config"] == {"script": "  keeps its indent\n"}


@pytest.mark.parametrize(
    ("source", "text"),
    [
        (
            'job "x" {\n  datacenter = ["dc1"]\n}\n',
            'input.hcl:2,3-13: Unsupported argument; An argument named "datacenter" is not expected here. '
            'Did you mean "datacenters"?',
        ),
        (
            'job "x" {\n  group "g" {\n    tusk "t" {}\n  }\n}\n',
            'input.hcl:3,5-9: Unsupported block type; Blocks of type "tusk" are not expected here. '
            'Did you mean "task"?',
        ),
        (
            'job "x" {\n  group "g" {\n    restart { delay = "15 seconds" }\n  }\n}\n',
            "input.hcl:3,24-34: Unsuitable value type; Unsuitable duration value: "
            'time: unknown unit " seconds" in duration "15 seconds"',
        ),
        (
            'job "x" {\n  group "g" {\n    count = "many"\n  }\n}\n',
            "input.hcl:3,14-18: Unsuitable value type; Unsuitable value: a number is required",
        ),
        ("job {\n}\n", "input.hcl:1,5-6: Missing name for job; All job blocks must have 1 labels (name)."),
        ("# only a comment\n", "<nil>: Missing job block; A job block is required"),
        (
            '  {"job": {"x": {}}}',
            "<nil>: Unsupported syntax; "
            "The simulated cluster reads HCL's native syntax, not its JSON syntax.",
        ),
        (
            'job "x" {\n  type = "batch" priority = 3\n}\n',
            "input.hcl:2,18-26: Missing newline after argument; "
            "An argument definition must end with a newline.",
        ),
        (
            'job "x" {\n  group "g" {\n',
            "input.hcl:2,13-14: Unclosed configuration block; There is no closing brace for this block "
            "before the end of the file. This may be caused by incorrect brace nesting elsewhere in this "
            "file.",
        ),
        (
            'job "x" {\n  type = "a"\n  type = "b"\n}\n',
            'input.hcl:3,3-7: Attribute redefined; The argument "type" was already set at input.hcl:2,3-7. '
            "Each argument may be set only once.",
        ),
    ],
)
def test_a_jobspec_nomad_refuses_names_the_place_and_the_reason(source: str, text: str) -> None:
    with pytest.raises(HclError) as refused:
        parse_job(source)
    assert refused.value.text.split("\n")[0] == text


def test_every_problem_of_the_decoding_is_listed_one_a_line() -> None:
    with pytest.raises(HclError) as refused:
        parse_job('job "x" {\n  typo = 1\n  group "g" {\n    service {}\n  }\n}\n')
    assert refused.value.text.split("\n") == [
        'input.hcl:2,3-7: Unsupported argument; An argument named "typo" is not expected here. '
        'Did you mean "type"?',
        'input.hcl:4,5-12: Unsupported block type; Blocks of type "service" are valid in Nomad but not read '
        "by the simulated cluster.",
    ]


def test_canonicalize_fills_the_api_packages_defaults_and_keeps_what_was_written() -> None:
    job = canonical_api_job(parse_job(POSEIDON_TEMPLATE))
    assert (job["Region"], job["Namespace"], job["Priority"], job["NodePool"]) == (
        "global",
        "default",
        50,
        "",
    )
    assert (job["Datacenters"], job["Update"], job["Stop"], job["Version"]) == (["dc1"], None, False, 0)
    runner, config = job["TaskGroups"]
    assert runner["EphemeralDisk"] == {"Migrate": False, "SizeMB": 10, "Sticky": False}
    assert runner["RestartPolicy"]["RenderTemplates"] is False
    assert (runner["ReschedulePolicy"]["Attempts"], runner["Migrate"]) == (3, None)
    assert runner["Spreads"][0]["Weight"] == 100
    task = runner["Tasks"][0]
    assert (task["KillTimeout"], task["RestartPolicy"]) == (0, runner["RestartPolicy"])
    assert task["LogConfig"] == {"MaxFiles": 1, "MaxFileSizeMB": 1, "Enabled": None, "Disabled": False}
    assert task["Resources"] == RESOURCES_ZERO | {"CPU": 40, "Cores": 0, "MemoryMB": 50}
    assert (config["EphemeralDisk"]["SizeMB"], config["Count"]) == (300, 0)
    assert config["ReschedulePolicy"] == {
        "Attempts": 1, "Interval": 24 * 3600 * S, "Delay": 5 * S, "DelayFunction": "constant", "MaxDelay": 0,
        "Unlimited": False,
    }  # fmt: skip
    assert config["Tasks"][0]["KillTimeout"] == 5 * S
    assert parse_job(POSEIDON_TEMPLATE) == POSEIDON_JOB, "the parsed job itself is left as it was"


VARIABLES_TEMPLATE: Final = """
locals {
  image = "${local.registry}/${var.image}"  # a local before the one it uses
  registry = "registry.example.org"
  first    = 1
  key      = "role"
}
variable "image" {
  type    = string
  default = "co_execenv_python:3.8"
}
variable "runners" {
  type = number
}
variable "datacenters" {
  type        = list(string)
  description = "where runners may go"
  default     = ["dc1"]
}
variables {
  pool = "default"
}
job "template-0" {
  datacenters = var.datacenters
  node_pool   = var.pool
  group "default-group" {
    count = var.runners
    task "default-task" {
      driver = "docker"
      config {
        image = local.image
        args  = [var.datacenters[0], "${var.runners}", "-n${var.runners}", var.datacenters[local.first]]
        labels = { (local.key) = "runner" }
      }
    }
  }
}
"""


def test_variables_and_locals_are_evaluated_with_the_requests_values() -> None:
    job = parse_job(
        VARIABLES_TEMPLATE, variables='runners = "3"\ndatacenters = ["dc-a", "dc-b"]\nunknown = 1\n'
    )
    assert (job["Datacenters"], job["NodePool"]) == (["dc-a", "dc-b"], "default")
    [group] = job["TaskGroups"]
    assert group["Count"] == 3, "the number type converts the string"
    assert group["Tasks"][0]["Config"] == {
        "image": "registry.example.org/co_execenv_python:3.8",
        "args": ["dc-a", 3, "-n3", "dc-b"],
        "labels": [{"role": "runner"}],
    }, "an interpolation alone keeps its value's type, as hcl's template wrap does"


@pytest.mark.parametrize(
    ("variables", "source", "text"),
    [
        (
            "",
            VARIABLES_TEMPLATE,
            '<nil>: Unset variable "runners"; A used variable must be set or have a default value; see '
            "https://developer.hashicorp.com/nomad/docs/job-specification/hcl2/variables for details.",
        ),
        (
            'runners = "many"',
            VARIABLES_TEMPLATE,
            "input.hcl:1,12-16: Invalid value for variable; The value for runners is not compatible with the "
            "variable's type constraint: a number is required.",
        ),
        (
            "",
            'job "x" {\n  name = var.nothing\n}\n',
            "input.hcl:2,13-21: Unsupported attribute; "
            'This object does not have an attribute named "nothing".',
        ),
        (
            'variable "x" {}',
            'variable "x" {}\njob "x" {}\n',
            "input.hcl:1,1-9: Variable declaration in a .var file; A .var file is used to assign values to "
            "variables that have already been declared in job files, not to declare new variables. "
            'To declare variable "x", place this block in one of your job files',
        ),
    ],
)
def test_a_variable_nomad_refuses_is_named(variables: str, source: str, text: str) -> None:
    with pytest.raises(HclError) as refused:
        parse_job(source, variables=variables)
    assert refused.value.text.split("\n")[0] == text
