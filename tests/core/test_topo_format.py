"""The `nvidia-smi topo -m` reader against every real sample, and against broken variants."""

from __future__ import annotations

import re

import pytest

from tests.core.topo_fixtures import FIXTURES, TOPO_FILES, fixture_text, glued_h200
from topoweb.core.formats import ParseError, detect_format, parse_text
from topoweb.core.formats.topo import parse
from topoweb.core.model import Topology


def read(prefix: str) -> Topology:
    return parse(fixture_text(prefix))


def ids(topo: Topology) -> list[str]:
    return [d.id for d in topo.devices]


def gpus(n: int) -> list[str]:
    return [f"GPU{i}" for i in range(n)]


# --- every sample ----------------------------------------------------------------------


@pytest.mark.parametrize("name", TOPO_FILES)
def test_every_sample_is_detected_as_a_topology_and_reads_square_and_symmetric(
    name: str,
) -> None:
    text = (FIXTURES / name).read_text()
    assert detect_format(text) == "topology"
    topo = parse_text(text)
    assert isinstance(topo, Topology)
    n = len(topo.devices)
    assert len(topo.links) == n * (n - 1) // 2
    # A mangled paste's repairs are warned of (each checked in its sample's own test).
    # Only a mangled capture, or one with another command's matrix after it, warns.
    assert topo.warnings == () or "MANGLED" in name or "plus-topo-p2p" in name
    for link in topo.links:
        assert topo.link_class(link.b, link.a) == link.link_class != "X"
        assert link.link_class != "SOC"


# --- one test (or more) per sample ---------------------------------------------------------


def test_h200_reads_eight_gpus_then_twelve_nics_named_by_the_legend() -> None:
    topo = read("topo_01")
    assert ids(topo) == gpus(8) + [f"NIC{i}" for i in range(12)]
    assert [d.nic_name for d in topo.nics] == [f"mlx5_{i}" for i in range(12)]
    assert [d.index for d in topo.nics] == list(range(12))
    assert {lnk.link_class for lnk in topo.gpu_links()} == {"NV18"}
    assert topo.link_class("GPU0", "NIC0") == "PXB"
    assert topo.link_class("GPU1", "NIC3") == "PXB"
    assert topo.link_class("GPU4", "NIC6") == "PXB"
    assert topo.link_class("GPU0", "NIC6") == "SYS"
    assert topo.link_class("NIC1", "NIC2") == "PIX"
    assert topo.link_class("NIC10", "NIC11") == "NODE"


def test_h200_affinity_columns_survive_the_empty_cell_and_n_a_becomes_none() -> None:
    topo = read("topo_01")
    assert topo.gpu(0).cpu_affinity == "0-55,112-167"
    assert topo.gpu(0).numa_affinity == "0"
    assert topo.gpu(7).cpu_affinity == "56-111,168-223"
    assert topo.gpu(7).numa_affinity == "1"
    assert {d.gpu_numa_id for d in topo.gpus} == {None}
    nic = topo.device("NIC11")
    assert (nic.cpu_affinity, nic.numa_affinity, nic.gpu_numa_id) == (None, None, None)


def test_p40_reads_soc_as_sys_and_names_mlx5_directly() -> None:
    topo = read("topo_03")
    assert ids(topo) == gpus(8) + ["mlx5_0"]
    assert topo.device("mlx5_0").kind == "nic"
    assert topo.device("mlx5_0").nic_name == "mlx5_0"
    assert topo.link_class("GPU0", "mlx5_0") == "SYS"
    assert topo.link_class("GPU0", "GPU1") == "PIX"
    assert topo.link_class("GPU0", "GPU4") == "PXB"
    assert topo.gpu(5).cpu_affinity == "0-13"
    assert topo.gpu(5).numa_affinity is None


def test_seven_gpu_space_aligned_sample_reads_pix_and_phb() -> None:
    topo = read("topo_04")
    assert ids(topo) == gpus(7)
    assert topo.link_class("GPU0", "GPU2") == "PIX"
    assert topo.link_class("GPU2", "GPU3") == "PHB"
    assert topo.link_class("GPU5", "GPU6") == "PIX"
    assert topo.gpu(6).cpu_affinity == "0-19"


def test_m60_header_without_indent_reads_two_gpus() -> None:
    topo = read("topo_05")
    assert ids(topo) == gpus(2)
    assert topo.link_class("GPU0", "GPU1") == "SYS"
    assert topo.gpu(1).cpu_affinity == "0-11"


def test_nimbix_sample_skips_the_prompt_and_reads_mlx5_rows() -> None:
    topo = read("topo_06")
    assert ids(topo) == gpus(4) + ["mlx5_0"]
    assert topo.link_class("GPU2", "mlx5_0") == "PHB"
    assert topo.link_class("GPU0", "mlx5_0") == "SYS"
    assert topo.gpu(2).cpu_affinity == "8-15"


def test_dgx1_glued_header_reads_the_hybrid_cube_mesh_and_odd_nic_order() -> None:
    topo = read("topo_07")
    assert ids(topo) == gpus(8) + ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]
    assert [d.index for d in topo.nics] == [0, 1, 2, 3]
    # GPU0 has NVLinks to GPU1-4 and none to GPU5-7: the cube's cross edge is GPU0-GPU4.
    assert [topo.link_class("GPU0", f"GPU{i}") for i in range(1, 8)] == [
        "NV1",
        "NV1",
        "NV1",
        "NV1",
        "SYS",
        "SYS",
        "SYS",
    ]
    assert topo.link_class("GPU5", "GPU1") == "NV1"
    assert topo.link_class("GPU6", "GPU2") == "NV1"
    assert topo.link_class("GPU0", "mlx5_0") == "PIX"
    assert topo.link_class("GPU0", "mlx5_1") == "PHB"
    assert topo.link_class("GPU7", "mlx5_3") == "PIX"
    assert topo.gpu(3).cpu_affinity == "1-1"


def test_k80_reads_mlx4_after_a_prompt_and_blank_line() -> None:
    topo = read("topo_08")
    assert ids(topo) == gpus(4) + ["mlx4_0"]
    assert topo.device("mlx4_0").nic_name == "mlx4_0"
    assert topo.link_class("GPU3", "mlx4_0") == "PHB"
    assert topo.gpu(0).cpu_affinity == "0-3"


def test_rtx6000ada_space_aligned_numa_columns_and_nic_legend() -> None:
    topo = read("topo_09")
    assert ids(topo) == gpus(4) + ["NIC0", "NIC1", "NIC2", "NIC3"]
    assert [d.nic_name for d in topo.nics] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert [(d.cpu_affinity, d.numa_affinity, d.gpu_numa_id) for d in topo.gpus] == [
        ("0-31", "0", None),
        ("0-31", "0", None),
        ("32-63", "1", None),
        ("32-63", "1", None),
    ]
    assert topo.link_class("GPU0", "GPU2") == "SYS"
    assert topo.link_class("NIC2", "NIC3") == "PIX"


def test_threadripper_two_gpus_phb_and_two_nics() -> None:
    topo = read("topo_10")
    assert ids(topo) == ["GPU0", "GPU1", "NIC0", "NIC1"]
    assert topo.link_class("GPU0", "GPU1") == "PHB"
    assert topo.link_class("NIC0", "NIC1") == "PIX"
    assert topo.gpu(1).cpu_affinity == "0-23"


def test_indented_v100_reads_the_nv1_nv2_mesh() -> None:
    topo = read("topo_12")
    assert ids(topo) == gpus(8) + ["mlx5_0"]
    assert [topo.link_class("GPU0", f"GPU{i}") for i in range(1, 8)] == [
        "NV2",
        "NV2",
        "NV1",
        "NV1",
        "NODE",
        "NODE",
        "NODE",
    ]
    assert topo.link_class("GPU3", "GPU7") == "NV2"
    assert sum(1 for lnk in topo.gpu_links() if lnk.link_class == "NV2") == 8
    assert sum(1 for lnk in topo.gpu_links() if lnk.link_class == "NV1") == 8


def test_polaris_mixed_separator_header_reads_both_affinity_columns() -> None:
    topo = read("topo_13")
    assert ids(topo) == gpus(4) + ["mlx5_0", "mlx5_1"]
    assert [d.numa_affinity for d in topo.gpus] == ["3", "2", "1", "0"]
    assert topo.gpu(0).cpu_affinity == "24-31,56-63"
    assert topo.gpu(3).cpu_affinity == "0-7,32-39"
    assert topo.link_class("GPU3", "mlx5_0") == "PHB"
    assert topo.link_class("GPU1", "mlx5_1") == "PHB"


def test_timestamped_a100_reads_odd_affinity_strings_as_printed() -> None:
    topo = read("topo_15")
    assert ids(topo) == gpus(4) + ["NIC0"]
    assert topo.device("NIC0").nic_name == "mlx5_0"
    assert topo.gpu(2).cpu_affinity == "0,64"
    assert topo.gpu(2).numa_affinity == "0-3"
    assert topo.link_class("GPU3", "NIC0") == "PHB"


def test_rtx3090_bridge_ignores_the_trailing_prompt() -> None:
    topo = read("topo_17")
    assert ids(topo) == gpus(2)
    assert topo.link_class("GPU0", "GPU1") == "NV4"
    assert topo.link("GPU0", "GPU1").nvlinks == 4
    assert (topo.gpu(0).numa_affinity, topo.gpu(0).gpu_numa_id) == ("0", None)


def test_a100_pcie_reads_comma_list_affinity() -> None:
    topo = read("topo_18")
    assert topo.gpu(0).cpu_affinity == "0,2,4,6,8,10"
    assert topo.gpu(3).cpu_affinity == "1,3,5,7,9,11"
    assert topo.link_class("GPU1", "mlx5_0") == "NODE"


def test_della_a100_sxm_reads_nv4_and_mlx5() -> None:
    topo = read("topo_20")
    assert {lnk.link_class for lnk in topo.gpu_links()} == {"NV4"}
    assert topo.link_class("GPU2", "mlx5_0") == "SYS"
    assert topo.gpu(2).numa_affinity == "1"


def test_h100_without_nic_or_legend_reads_wide_affinity() -> None:
    topo = read("topo_22")
    assert ids(topo) == gpus(8)
    assert topo.gpu(4).cpu_affinity == "96-191,288-383"
    assert topo.gpu(4).numa_affinity == "1"
    assert topo.nics == ()


def test_single_visible_gpu_with_one_nic_under_a_prefix_line() -> None:
    topo = read("topo_25")
    assert ids(topo) == ["GPU0", "NIC0"]
    assert topo.link_class("GPU0", "NIC0") == "PHB"
    assert topo.gpu(0).cpu_affinity == "0-251"
    assert topo.device("NIC0").nic_name == "mlx5_0"


def test_dgx_a100_twelve_mlx5_columns_named_directly() -> None:
    topo = read("topo_26")
    assert ids(topo) == gpus(8) + [f"mlx5_{i}" for i in range(12)]
    assert topo.device("mlx5_11").nic_name == "mlx5_11"
    assert topo.link_class("GPU0", "mlx5_1") == "PXB"
    assert topo.link_class("mlx5_4", "mlx5_5") == "PIX"
    assert [d.numa_affinity for d in topo.gpus] == ["3", "3", "1", "1", "7", "7", "5", "5"]


def test_a100_with_four_nics_leaves_gpu4_to_7_far_from_every_nic() -> None:
    topo = read("topo_28")
    assert {topo.link_class(f"GPU{g}", f"NIC{n}") for g in range(4, 8) for n in range(4)} == {"SYS"}
    assert topo.link_class("GPU2", "NIC3") == "PXB"
    assert topo.gpu(5).cpu_affinity == "32-63,96-127"


def test_v100_nic0_without_legend_has_no_nic_name() -> None:
    topo = read("topo_29")
    assert ids(topo) == gpus(8) + ["NIC0"]
    assert topo.device("NIC0").nic_name is None
    assert topo.link_class("GPU4", "NIC0") == "PIX"
    assert topo.gpu(0).cpu_affinity == "0-3,8-11"


def test_slurm_noise_before_the_matrix_is_skipped() -> None:
    topo = read("topo_31")
    assert ids(topo) == gpus(8) + ["mlx5_0", "mlx5_1"]
    assert topo.link_class("GPU0", "GPU7") == "NV2"
    assert topo.link_class("GPU3", "GPU4") == "NV1"
    assert topo.link_class("GPU6", "mlx5_1") == "PIX"


def test_trailing_p2p_status_matrix_is_not_read_as_topology() -> None:
    topo = read("topo_32")
    assert ids(topo) == gpus(2)
    assert topo.link_class("GPU0", "GPU1") == "PIX"
    assert topo.gpu(0).cpu_affinity == "24-47,72-95"
    # Named at its command line, the one above its header (a bare header is named too).
    assert topo.warnings == ("line 16: another matrix starts; only the first is read",)
    bare = fixture_text("topo_32").replace(
        "root@autodl-container-xxxxx:~# nvidia-smi topo -p2p p\n", ""
    )
    assert parse(bare).warnings == ("line 16: another matrix starts; only the first is read",)
    assert read("topo_01").warnings == ()


def test_banners_around_an_all_node_matrix() -> None:
    topo = read("topo_34")
    assert ids(topo) == gpus(4)
    assert {lnk.link_class for lnk in topo.links} == {"NODE"}
    assert topo.gpu(3).cpu_affinity == "0-119"


def test_l40s_after_a_redacted_prompt() -> None:
    topo = read("topo_36")
    assert ids(topo) == gpus(4) + ["NIC0", "NIC1"]
    assert topo.link_class("GPU2", "NIC1") == "NODE"
    assert topo.link_class("NIC0", "NIC1") == "PIX"


def test_h20_merged_cells_are_split_into_valid_symmetric_classes() -> None:
    topo = read("topo_38")
    assert ids(topo) == gpus(8) + [f"NIC{i}" for i in range(36)]
    assert topo.device("NIC32").nic_name == "mlx5_bond_0"
    assert topo.device("NIC35").nic_name == "mlx5_bond_3"
    # `NODENODE` under NIC12/NIC13 and `NODEPIX` under NIC34/NIC35 in GPU0's row.
    assert topo.link_class("GPU0", "NIC12") == "NODE"
    assert topo.link_class("GPU0", "NIC13") == "NODE"
    assert topo.link_class("GPU0", "NIC34") == "NODE"
    assert topo.link_class("GPU0", "NIC35") == "PIX"
    assert topo.link_class("GPU2", "NIC34") == "PIX"
    # ` X PIX` and `PIX X` on the diagonal; ` X NODE` and `NODE X ` at the end.
    assert topo.link_class("NIC12", "NIC13") == "PIX"
    assert topo.link_class("NIC34", "NIC35") == "NODE"
    assert topo.gpu(4).cpu_affinity == "70-99,102-107"
    assert topo.gpu(4).numa_affinity == "1"
    # Every row has them, at the same columns: one warning for them all.
    assert topo.warnings == (
        "line 3: GPU0 and 43 more rows to line 46 have cells run together in the paste (such "
        "as 'NODENODE', 'NODEPIX', 'PIXNODE'): read apart as link classes",
    )


def test_cells_run_together_on_a_few_rows_are_warned_of_naming_each_line() -> None:
    # heldout devopsrustem/slurmv4 3/14.sh: `PIXNODE` (a lost tab) and ` X NODE` (a tab
    # turned into a space) in a tab-separated matrix; made here from topo_01 the same way.
    lines = fixture_text("topo_01").splitlines()
    lines[2] = lines[2].replace("\tPXB\tNODE\t", "\tPXBNODE\t")  # GPU0
    lines[6] = lines[6].replace("\t X \tNV18", "\t X NV18")  # GPU4
    text = "\n".join(lines)
    topo = parse(text)
    assert topo.devices == read("topo_01").devices
    assert topo.links == read("topo_01").links
    assert topo.warnings == (
        "line 3: GPU0: cells run together in the paste ('PXBNODE'): read apart as link classes",
        "line 7: GPU4: cells run together in the paste ('X NV18'): read apart as link classes",
    )


def test_rtx5090_pair_reads_phb() -> None:
    topo = read("topo_41")
    assert ids(topo) == gpus(2)
    assert topo.link_class("GPU0", "GPU1") == "PHB"
    assert topo.gpu(1).cpu_affinity == "0-63"


# --- variants made in the test from real text ----------------------------------------------


def test_topo_mp_output_with_pcie_classes_only_reads() -> None:
    text = fixture_text("topo_12")
    for nv in ("NV1", "NV2"):
        text = text.replace(f" {nv} ", " NODE")
    topo = parse(text)
    assert {lnk.link_class for lnk in topo.gpu_links()} == {"NODE"}


def test_tab_separated_and_space_aligned_forms_read_the_same() -> None:
    text = fixture_text("topo_01")
    assert parse(text.expandtabs(8)) == parse(text)


def test_a_missing_middle_value_keeps_its_place_by_the_expanded_tabs() -> None:
    # topo_09 is space-aligned: its tabs were expanded, so an empty value still leaves the tab
    # stops it took, and the values after it sit where the fields put them.
    text = fixture_text("topo_09").replace(
        "0-31    0               N/A", "0-31                    N/A", 1
    )
    topo = parse(text)
    assert topo.gpu(0).cpu_affinity == "0-31"
    assert topo.gpu(0).numa_affinity is None
    assert topo.gpu(1).numa_affinity == "0"
    assert topo.warnings == ()


def test_a_value_off_its_tab_stop_is_placed_by_position_with_a_warning() -> None:
    # One space more and N/A is on no tab stop: the spaces are not expanded tabs to count.
    text = fixture_text("topo_09").replace(
        "0-31    0               N/A", "0-31                     N/A", 1
    )
    topo = parse(text)
    assert (topo.gpu(0).cpu_affinity, topo.gpu(0).numa_affinity) == ("0-31", None)
    assert len(topo.warnings) == 1
    assert "line 3" in topo.warnings[0] and "placed by position" in topo.warnings[0]


# dask-cuda#1381: `srun -c32 nvidia-smi topo -m` on 8 A100s; Slurm's CPU set holds none of
# socket 1's CPUs, so GPU4-7 print an empty CPU Affinity (tabs expanded in the paste). The
# stored page ends inside the NIC0 row: completed here from NIC0's column (the matrix is
# symmetric).
SLURM_EMPTY_CPU_AFFINITY = """\
$ srun --gpus=A100_80GB:8 -c32 --mem 128GB --pty nvidia-smi topo -m
        GPU0    GPU1    GPU2    GPU3    GPU4    GPU5    GPU6    GPU7    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV12    NODE    NODE    NODE    NODE    NODE    NODE    NODE    0-15,56-71      0               N/A
GPU1    NV12     X      NODE    NODE    NODE    NODE    NODE    NODE    NODE    0-15,56-71      0               N/A
GPU2    NODE    NODE     X      NV12    NODE    NODE    NODE    NODE    NODE    0-15,56-71      0               N/A
GPU3    NODE    NODE    NV12     X      NODE    NODE    NODE    NODE    NODE    0-15,56-71      0               N/A
GPU4    NODE    NODE    NODE    NODE     X      NV12    NODE    NODE    NODE            1               N/A
GPU5    NODE    NODE    NODE    NODE    NV12     X      NODE    NODE    NODE            1               N/A
GPU6    NODE    NODE    NODE    NODE    NODE    NODE     X      NV12    PHB             1               N/A
GPU7    NODE    NODE    NODE    NODE    NODE    NODE    NV12     X      NODE            1               N/A
NIC0    NODE    NODE    NODE    NODE    NODE    NODE    PHB     NODE     X
"""  # noqa: E501


def test_an_empty_cpu_affinity_in_a_space_aligned_capture_is_read_empty_unwarned() -> None:
    topo = parse(SLURM_EMPTY_CPU_AFFINITY)
    assert [(d.cpu_affinity, d.numa_affinity) for d in topo.devices[:8]] == [
        ("0-15,56-71", "0")
    ] * 4 + [(None, "1")] * 4
    assert {d.gpu_numa_id for d in topo.devices} == {None}
    assert topo.warnings == ()


def test_values_of_a_row_whose_spacing_was_collapsed_are_withheld_not_guessed() -> None:
    # The same capture as a web page's text shows it, every run of spaces one space: GPU4's
    # `1 N/A` stood under NUMA Affinity and GPU NUMA ID, but by position it read as CPU 1.
    text = "\n".join(" ".join(line.split()) for line in SLURM_EMPTY_CPU_AFFINITY.splitlines())
    topo = parse(text)
    assert topo.gpu(0).cpu_affinity == "0-15,56-71"
    assert [(d.cpu_affinity, d.numa_affinity) for d in topo.devices[4:8]] == [(None, None)] * 4
    assert len(topo.warnings) == 4
    assert topo.warnings[0] == (
        "line 7: GPU4 has 2 values for 3 columns and its spacing was collapsed in the paste, "
        "so which columns they belong to cannot be told: its CPU Affinity, NUMA Affinity, "
        "GPU NUMA ID are left out"
    )


def test_a_header_on_the_same_line_as_the_nvidia_topology_prefix_reads() -> None:
    text = fixture_text("topo_25").replace("NVIDIA Topology: \n", "NVIDIA Topology: ")
    assert ids(parse(text)) == ["GPU0", "NIC0"]


def spaced_rows(prefix: str, rows: int) -> str:
    """A sample's text as a markdown paste spaces it: a line of two spaces after the header
    and a blank line after every row of the matrix (heldout Tencent/PatrickStar style)."""
    lines = fixture_text(prefix).splitlines()
    header = next(i for i, line in enumerate(lines) if "GPU1" in line)
    spaced = lines[: header + 1] + ["  "]
    for line in lines[header + 1 : header + 1 + rows]:
        spaced += [line, ""]
    return "\n".join(spaced + lines[header + 1 + rows :]) + "\n"


def test_blank_lines_between_the_rows_of_a_markdown_paste_are_skipped() -> None:
    text = spaced_rows("topo_12", 9)
    topo = parse(text)
    assert topo == read("topo_12")
    assert topo.warnings == ()
    # Rows keep their own lines: the asymmetric GPU5 row is named on its line in the paste.
    exc = error(text.replace("  GPU5    NODE    NV2 ", "  GPU5    NODE    PIX ", 1))
    assert exc.line == 14
    assert "GPU1-GPU5 is NV2 on line 6" in exc.message


def test_a_matrix_cut_after_blank_lines_is_truncated_where_the_blank_lines_start() -> None:
    lines = spaced_rows("topo_10", 2).splitlines()
    exc = error("\n".join(lines[:7] + ["", "Legend:"]))  # GPU0 and GPU1 rows, no NIC rows
    assert exc.line == 7
    assert "NIC0 NIC1" in exc.message and "the matrix ends" in exc.message


def as_table(prefix: str, rows: int, grid: bool = False) -> str:
    """A sample's matrix retyped as a markdown table (NV# cells in bold, as a blog post has
    them) or as an RST grid table, under a heading line."""
    lines = fixture_text(prefix).splitlines()
    header = next(i for i, line in enumerate(lines) if "GPU1" in line)
    labels = [""] + re.split(r"\t|\s{2,}", lines[header].strip())
    table = [labels] + [lines[i].split() for i in range(header + 1, header + 1 + rows)]
    table = [[f"**{c}**" if c.startswith("NV") else c for c in row] for row in table]
    table = [row + [""] * (len(labels) - len(row)) for row in table]
    border = "+" + "+".join("-" * 8 for _ in labels) + "+"
    out = ["A-5 `nvidia-smi topo -m`", border if grid else ""]
    for n, row in enumerate(table):
        out.append("| " + " | ".join(row) + " |")
        out.append(border if grid else "|---" * len(labels) + "|" if n == 0 else None)
    return "\n".join(line for line in out if line is not None) + "\n"


def test_a_markdown_table_of_the_matrix_reads_from_its_cells_with_a_warning() -> None:
    text = as_table("topo_17", 2)
    assert "| GPU0 | X | **NV4** | 0-23 | 0 | N/A |" in text
    assert detect_format(text) == "topology"
    topo = parse(text)
    assert topo.devices == read("topo_17").devices
    assert topo.link_class("GPU0", "GPU1") == "NV4"
    assert topo.warnings == (
        "line 3: the matrix is a markdown table (a retyped `topo -m` output), read from its "
        "cells without their borders and bold markers: check it against the command's plain "
        "output",
    )


def test_a_table_heading_numa_for_numa_affinity_reads_it_as_numa_affinity() -> None:
    text = as_table("topo_10", 4).replace("| NUMA Affinity |", "| NUMA |")
    topo = parse(text)
    assert topo.gpu(1).numa_affinity == "0"
    assert [d.nic_name for d in topo.nics] == [None, None]  # no legend in the table


def test_an_rst_grid_table_whose_rows_repeat_labels_is_refused_at_the_repeated_row() -> None:
    text = as_table("topo_12", 9, grid=True)
    for n in range(4):  # the NCSA Delta table's slip: GPU4..GPU7's rows labelled GPU0..GPU3
        text = re.sub(rf"^\| GPU{n + 4} \|", f"| GPU{n} |", text, flags=re.M)
    assert detect_format(text) == "topology"
    exc = error(text)
    assert exc.line == 13  # the relabelled GPU4 row, the first row after GPU0..GPU3
    assert exc.message.startswith("device GPU0 has two rows (lines 5 and 13)")
    assert "GPU4 GPU5 GPU6 GPU7 mlx5_0" in exc.message
    assert "in an RST grid table of `topo -m` output from line 3" in exc.message


def test_a_table_with_an_empty_link_cell_is_refused_naming_the_table() -> None:
    text = as_table("topo_17", 2).replace("| **NV4** | X |", "|  | X |")
    exc = error(text)
    assert exc.line == 6
    assert "no cell for GPU0" in exc.message and "markdown table" in exc.message


def test_text_of_no_known_format_is_refused_from_its_first_line() -> None:
    with pytest.raises(ParseError) as info:
        detect_format("Our GPUs are fast.\n| a | b |\n")
    assert info.value.line == 1


# --- errors ------------------------------------------------------------------------------


def error(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(text)
    return info.value


def test_it_rejects_an_empty_file() -> None:
    assert error("").message == "the input is empty"
    assert error("\n  \n").line == 1


def test_it_rejects_binary_junk_naming_the_line() -> None:
    exc = error("GPU0\tGPU1\nGPU0\t X \x00\x01\x02\xff")
    assert exc.line == 2
    assert "binary" in exc.message


def test_it_rejects_a_random_paragraph() -> None:
    exc = error("Our GPUs are fast.\nWe wired them carefully,\nand the benchmarks agree.\n")
    assert "no `nvidia-smi topo -m` matrix found" in exc.message


def test_it_rejects_a_truncated_matrix_naming_the_line() -> None:
    lines = fixture_text("topo_01").splitlines()
    exc = error("\n".join(lines[:8]))  # prompt, header, GPU0..GPU5
    assert exc.line == 9
    assert "truncated" in exc.message
    assert "GPU6 GPU7 NIC0" in exc.message


def test_it_rejects_a_row_with_a_missing_cell_naming_the_row() -> None:
    lines = fixture_text("topo_04").splitlines()
    lines[3] = lines[3].replace("PIX      X      PHB", "PIX      X")
    exc = error("\n".join(lines))
    assert exc.line == 4
    assert "row GPU2 has 6 link cells" in exc.message


def test_it_rejects_an_asymmetric_cell_naming_the_pair_and_the_line() -> None:
    text = fixture_text("topo_12").replace("  GPU5    NODE    NV2 ", "  GPU5    NODE    PIX ", 1)
    exc = error(text)
    assert exc.line == 8
    assert "not symmetric" in exc.message
    assert "GPU5-GPU1 is PIX here but GPU1-GPU5 is NV2 on line 4" in exc.message


def test_it_rejects_a_diagonal_that_is_not_x() -> None:
    text = fixture_text("topo_05").replace("GPU1    SOC     X ", "GPU1    SOC     SOC ")
    exc = error(text)
    assert exc.line == 3
    assert "diagonal" in exc.message


def test_it_rejects_an_x_off_the_diagonal_naming_the_pair() -> None:
    text = fixture_text("topo_01").replace(
        "NIC1\tNODE\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tNODE\t X \tPIX",
        "NIC1\tNODE\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tNODE\t X \t X ",
    )
    text = text.replace(
        "NIC2\tNODE\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tNODE\tPIX",
        "NIC2\tNODE\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tNODE\t X ",
    )
    exc = error(text)
    assert exc.line == 13
    assert exc.message == "NIC2-NIC1 is X, but X marks only the diagonal"


def test_it_rejects_an_unknown_cell_naming_the_column() -> None:
    text = fixture_text("topo_10").replace(
        "NIC1    NODE    NODE    PIX", "NIC1    NODE    QPI     PIX"
    )
    exc = error(text)
    assert exc.line == 6
    assert "'QPI' is not a link class" in exc.message
    assert "column GPU1" in exc.message


def test_it_rejects_a_lone_p2p_status_matrix() -> None:
    text = "\n".join(fixture_text("topo_32").splitlines()[15:])  # from the -p2p prompt on
    exc = error(text)
    assert "`nvidia-smi topo -p2p` status matrix" in exc.message
    assert exc.line == 3  # the first row, " GPU0   X       NS"
    with pytest.raises(ParseError, match="status matrix"):
        parse_text(text)


def test_it_rejects_a_header_with_no_rows() -> None:
    exc = error("$ nvidia-smi topo -m\n\tGPU0\tGPU1\tCPU Affinity\n\nLegend:\n")
    assert exc.line == 2
    assert "not followed by a row" in exc.message


def test_it_rejects_a_duplicated_device_row() -> None:
    text = "\tGPU0\tGPU0\nGPU0\t X \tPIX\nGPU0\tPIX\t X \n"
    exc = error(text)
    assert exc.line == 3
    assert "two rows" in exc.message


def test_a_real_terminal_capture_with_ansi_underline_escapes_reads_one_gpu() -> None:
    # Captured by this project on a leased single-GPU H200 VM (tests/fixtures/INDEX.tsv).
    topology = parse(fixture_text("topo_42"))

    (gpu,) = topology.devices
    assert (gpu.id, gpu.cpu_affinity, gpu.numa_affinity, gpu.gpu_numa_id) == (
        "GPU0",
        "0-15",
        "0",
        None,
    )
    assert topology.links == ()


# --- CPU and NUMA affinity glued together (topo_23 style) -----------------------------------


def test_glued_cpu_and_numa_affinity_is_split_when_only_one_reading_fits() -> None:
    text = glued_h200()
    assert "0-45,92-1370\t" in text  # the mangling the reader must undo
    topo = parse(text)
    assert topo.gpu(0).cpu_affinity == "0-45,92-137"
    assert topo.gpu(0).numa_affinity == "0"
    assert topo.gpu(7).cpu_affinity == "46-91,138-183"
    assert topo.gpu(7).numa_affinity == "1"
    assert len(topo.warnings) == 8
    assert "glued" in topo.warnings[0] and "'0-45,92-1370'" in topo.warnings[0]


def test_glued_affinity_that_reads_two_ways_is_withheld_with_a_warning() -> None:
    # One socket, "0-63" + "0": "0-63 on node 0" and "0-6 on node 30" both fit.
    text = fixture_text("topo_41").replace("\t0-63\t0\t", "\t0-630\t")
    topo = parse(text)
    assert topo.gpu(0).cpu_affinity is None
    assert topo.gpu(0).numa_affinity is None
    assert len(topo.warnings) == 2
    assert "no pinning hint" in topo.warnings[0] and "'0-630'" in topo.warnings[0]


def test_a_missing_numa_value_is_not_taken_for_a_glued_one() -> None:
    # "0-31" could split as CPUs 0-3 on node 1, but GPU1's intact row says 0-31 is node 0.
    text = fixture_text("topo_09").replace(
        "0-31    0               N/A", "0-31                    N/A", 1
    )
    assert parse(text).gpu(0).cpu_affinity == "0-31"


MATRIX_PCI_WARNING = (
    "this is `nvidia-smi topo -mp` output (PCIe paths only): NVLinks between the GPUs, if any, "
    "are not shown; upload `nvidia-smi topo -m` to see them"
)


def test_topo_mp_output_is_read_with_a_warning_that_nvlinks_are_not_shown() -> None:
    # `nvidia-smi topo -mp` prints the PCIe paths only: the same matrix without NV# cells, and a
    # legend without its NV# line. Told by that legend or by the command line above it.
    text = fixture_text("topo_09")  # RTX 6000 Ada, PCIe only, legend with NV#
    assert MATRIX_PCI_WARNING not in read("topo_09").warnings
    no_nv_legend = "\n".join(ln for ln in text.splitlines() if "NV#" not in ln)
    assert MATRIX_PCI_WARNING in parse(no_nv_legend).warnings
    assert MATRIX_PCI_WARNING in parse("$ nvidia-smi topo -mp\n" + text).warnings
    assert MATRIX_PCI_WARNING not in parse("$ nvidia-smi topo -m\n" + text).warnings


def test_a_legend_clipped_before_its_nv_line_does_not_call_a_matrix_with_nvlinks_topo_mp() -> None:
    # topo_12's legend cut before `NV# = ...`, its last line: its NV1/NV2 cells say it is -m.
    text = "\n".join(ln for ln in fixture_text("topo_12").splitlines() if "NV#" not in ln)
    assert "Legend:" in text and "PIX  =" in text
    assert parse(text).warnings == ()


def test_a_last_cell_cut_short_into_the_cpu_affinity_reads_as_its_only_class() -> None:
    # heldout A100 VM report: `PH0-115` for `PHB<TAB>0-115` on every GPU row; here topo_10's
    # GPU0 row loses `DE` and the spaces of its last cell, NODE under NIC1.
    text = fixture_text("topo_10").replace("NODE    0-23", "NO0-23", 1)
    topo = parse(text)
    assert topo.link_class("GPU0", "NIC1") == "NODE"
    assert topo.gpu(0).cpu_affinity is None
    assert topo.gpu(0).numa_affinity == "0"
    assert topo.warnings == (
        "line 3: GPU0: 'NO0-23' is the last link cell cut short and run into the value after "
        "it: read as NODE, and that value is left out (what was lost may include its start)",
    )
    # The class is checked against the other row: NIC1's says NODE, so `PI` (PIX) is refused.
    exc = error(fixture_text("topo_10").replace("NODE    0-23", "PI0-23", 1))
    assert exc.line == 6 and "not symmetric" in exc.message
    # `P` starts PHB, PXB and PIX: which one is not readable.
    exc = error(fixture_text("topo_10").replace("NODE    0-23", "P0-23", 1))
    assert exc.line == 3 and "'P0-23' is not a link class" in exc.message


def test_a_note_typed_after_a_row_s_values_is_ignored_with_a_warning() -> None:
    # heldout devlog: `GPU0  X  NV2   <- 034 의 NODE(PCIe) -> NV2 로 복구` under a header with no
    # value columns; here after topo_41's values, in the same words.
    lines = fixture_text("topo_41").splitlines()
    lines[2] += "       ← 034 의 NODE(PCIe) → PHB 로 복구"
    topo = parse("\n".join(lines))
    assert topo.devices == read("topo_41").devices
    assert topo.warnings == (
        "line 3: GPU1: the text after its 3 values ('← 034 의 NODE(PCIe) → PHB 로 복구') is "
        "a note typed after the row, not part of the matrix: ignored",
    )
    # A surplus that reads like a value is no note: the header is missing a column.
    lines[2] = lines[2].split("←")[0] + "0-63"
    exc = error("\n".join(lines))
    assert exc.line == 3 and "has 4 values after its link cells" in exc.message


@pytest.mark.parametrize("escape", ["\x1b[4m", "[4m"])
@pytest.mark.parametrize("spaced", [False, True])
def test_empty_affinity_cells_under_an_underlined_header_keep_their_columns(
    escape: str, spaced: bool
) -> None:
    # heldout sglang check_env: the header wrapped in an underline escape (or its `[4m`
    # remnant) and every GPU row ending `<TAB><TAB><TAB><TAB>N/A`: CPU and NUMA affinity empty.
    lines = fixture_text("topo_41").splitlines()
    lines[0] = lines[0].replace("\tGPU0", f"\t{escape}GPU0") + escape.replace("4", "0")
    lines[1] = "GPU0\t X \tPHB\t\t\t\t1"
    lines[2] = "GPU1\tPHB\t X \t\t\t\tN/A"
    if spaced:  # the tabs expanded: the tab stops the values sit on tell their fields
        lines[1:3] = [line.expandtabs(8) for line in lines[1:3]]
    topo = parse("\n".join(lines))
    assert [(d.cpu_affinity, d.numa_affinity, d.gpu_numa_id) for d in topo.devices] == [
        (None, None, "1"),
        (None, None, None),
    ]
    # Tabs keep an empty value's place (expanded, its tab stops do), so the values are read as
    # printed: nothing to warn of.
    assert topo.warnings == ()


def test_a_tab_separated_capture_without_cpu_or_numa_affinity_reads_them_empty_unwarned() -> None:
    # topo_43, a real H800 check_env: every GPU row ends `<TAB><TAB><TAB><TAB>N/A` and every NIC
    # row in four empty fields; the values are empty, not lost, and were warned of as placed.
    topo = read("topo_43")
    assert ids(topo) == gpus(4) + [f"NIC{i}" for i in range(17)]
    assert {(d.cpu_affinity, d.numa_affinity, d.gpu_numa_id) for d in topo.devices} == {
        (None, None, None)
    }
    assert topo.device("NIC16").nic_name == "mlx5_16"
    assert topo.link_class("GPU0", "GPU3") == "NV8"
    assert topo.link_class("GPU0", "NIC4") == topo.link_class("GPU3", "NIC16") == "PIX"
    assert topo.warnings == ()


def test_one_empty_value_among_full_rows_keeps_its_place_by_the_tabs() -> None:
    # topo_01's GPU0 with its NUMA value left empty: the tabs around it say where it was, as
    # the other rows' fields do, so it is empty (not lost, and not glued to the CPU list).
    text = fixture_text("topo_01").replace("\t0-55,112-167\t0\t\t", "\t0-55,112-167\t\t\t", 1)
    topo = parse(text)
    gpu0 = topo.gpu(0)
    assert (gpu0.cpu_affinity, gpu0.numa_affinity, gpu0.gpu_numa_id) == ("0-55,112-167", None, None)
    assert topo.gpu(1).numa_affinity == "0"
    assert topo.warnings == ()


def test_a_matrix_quoted_in_an_email_reply_is_read_as_if_it_were_not() -> None:
    # topo_44: a kernel patch's commit message quoted `>>> ` deep in a reply, with the matrix
    # before and after the change; parse_text takes the quote marks off before the reader.
    topo = parse_text(fixture_text("topo_44"))
    assert isinstance(topo, Topology)
    assert ids(topo) == gpus(3)
    assert {link.link_class for link in topo.links} == {"NV2"}
    assert {d.cpu_affinity for d in topo.devices} == {"0-0"}
    assert topo.warnings == ("line 38: another matrix starts; only the first is read",)


@pytest.mark.parametrize("marker", ["# ", "#", "#   ", "## "])
def test_a_commented_out_matrix_reads_as_the_plain_one(marker: str) -> None:
    # A script's comment holding the output (a vLLM/NIXL smoke test quotes a quad-GH200 node's
    # matrix so): `#` before every line, which no header or row starts with.
    text = fixture_text("topo_01")
    topo = parse_text("\n".join(marker + line for line in text.splitlines()))
    plain = parse(text)
    assert isinstance(topo, Topology)
    assert (topo.devices, topo.links) == (plain.devices, plain.links)
    assert topo.warnings == (
        f"line 2: the matrix is commented out ({marker.strip()!r} before its lines): read "
        "without those marks",
    )


def test_the_reader_on_its_own_reads_a_quoted_matrix_too() -> None:
    # parse_text takes a reply's `>` off before any reader; the reader called on its own (as
    # the cost and placement tests call it on every sample) reads it as well, and says so.
    topo = read("topo_44")
    assert (topo.devices, topo.links) == (
        parse_text(fixture_text("topo_44")).devices,
        parse_text(fixture_text("topo_44")).links,
    )
    assert topo.warnings[0] == (
        "line 32: the matrix is quoted ('>>>' before its lines): read without those marks"
    )


def test_rows_pasted_without_their_header_are_refused_at_the_first_row() -> None:
    # A README's "GPU Detection Results": a script kept the lines starting GPU, not the header.
    text = "NVLink Topology:\nGPU0   X   NV4  0-31  0   N/A\nGPU1  NV4   X   0-31  0   N/A\n"
    exc = error(text)
    assert exc.line == 2
    assert "a matrix row (GPU0 ...) with no header line above it" in exc.message


@pytest.mark.parametrize(("fixture", "width", "over"), [
    ("topo_01", 80, "lines 3-4"),  # 8 GPUs and 12 NICs: the header over three lines
    ("topo_09", 64, "line 3"),
])  # fmt: skip
def test_a_header_wrapped_at_a_width_is_refused_naming_its_lines(
    fixture: str, width: int, over: str
) -> None:
    # Output hard-wrapped at a terminal's or a mail program's width (as `fold -w` does): the
    # header's devices go on over the next lines before the first row. It was refused as
    # "missing or truncated".
    text = "\n".join(
        piece
        for line in fixture_text(fixture).splitlines()
        for piece in _folded(line.expandtabs(), width)
    )
    with pytest.raises(ParseError) as info:
        parse_text(text)
    assert info.value.line == 2
    assert f"the matrix header goes on over {over}, wrapped at a" in str(info.value)


def _folded(line: str, width: int) -> list[str]:
    return [line[at : at + width] for at in range(0, len(line), width)] or [""]


@pytest.mark.parametrize(("numbered", "shown"), [(False, "vllm-1  |"), (True, "3")])
def test_rows_behind_a_log_prefix_are_refused_naming_the_prefix(numbered: bool, shown: str) -> None:
    # `docker compose logs` puts the service's name before every line, an editor's `:set
    # number` a line number: the matrix was refused as "missing or truncated".
    lines = fixture_text("topo_09").splitlines()
    text = "\n".join(
        (f"{n:>3} " if numbered else "vllm-1  | ") + line for n, line in enumerate(lines, 1)
    )
    with pytest.raises(ParseError) as info:
        parse_text(text)
    assert info.value.line == 3
    assert f"the rows under the header have {shown!r} before their device names" in str(info.value)


def test_amds_topology_table_is_refused_as_what_it_is() -> None:
    # `rocm-smi --showtopo` titles each table and labels its GPU0.. columns as topo -m does.
    text = (
        f"{' ROCm System Management Interface ':=^90}\n"
        f"{' Weight between two GPUs ':=^90}\n"
        "       GPU0         GPU1\n"
        "GPU0   0            15\n"
        "GPU1   15           0\n"
    )
    with pytest.raises(ParseError) as err:
        parse_text(text)
    assert err.value.line == 1
    assert err.value.message == (
        "this is `rocm-smi --showtopo` output (AMD GPUs), not `nvidia-smi topo -m`"
    )


# Modelled on a blog's retyped H200 capture (weiziyang.wiki, "GPU communication (1)"): a dashed
# rule under the header and the last two labels shortened.
RETYPED_WITH_RULE = """\
      GPU0  GPU1  NIC0  NIC1  CPU Affinity   NUMA  GPU NUMA
------------------------------------------------------------
GPU0   X    NV18  PIX   SYS   0,2-47,96-143  0     N/A
GPU1  NV18   X    SYS   PIX   48-95,144-191  1     N/A
NIC0  PIX   SYS    X    SYS
NIC1  SYS   PIX   SYS    X

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_bond_0
"""


def test_a_rule_under_the_header_is_skipped_and_shortened_labels_are_read_as_named() -> None:
    topo = parse(RETYPED_WITH_RULE)
    assert ids(topo) == ["GPU0", "GPU1", "NIC0", "NIC1"]
    assert topo.link_class("GPU0", "GPU1") == "NV18"
    assert topo.link_class("GPU1", "NIC1") == "PIX"
    assert (topo.gpu(1).cpu_affinity, topo.gpu(1).numa_affinity) == ("48-95,144-191", "1")
    assert [d.nic_name for d in topo.nics] == ["mlx5_0", "mlx5_bond_0"]
    assert topo.warnings == (
        "line 1: the header's 'NUMA', 'GPU NUMA' read as NUMA Affinity, GPU NUMA ID "
        "(a retyped header: nvidia-smi prints the full labels)",
    )
    # A rule between two rows is skipped as a blank line is.
    ruled_rows = RETYPED_WITH_RULE.replace("NIC0  PIX", "=====\nNIC0  PIX")
    assert parse(ruled_rows).link_class("NIC0", "NIC1") == "SYS"


def test_a_header_ending_in_a_bare_numa_label_is_not_read_as_a_device() -> None:
    # Modelled on a plan's 8 x H100 PCIe capture with bridges on pairs: only a NUMA column.
    text = "\tGPU0\tGPU1\tGPU2\tNUMA\nGPU0\t X \tNODE\tNV12\t0\nGPU1\tNODE\t X \tSYS\t0\n"
    text += "GPU2\tNV12\tSYS\t X \t1\n"
    topo = parse(text)
    assert ids(topo) == gpus(3)
    assert [g.numa_affinity for g in topo.gpus] == ["0", "0", "1"]
    assert topo.link_class("GPU0", "GPU2") == "NV12"


def test_a_sentence_naming_gpus_after_the_matrix_is_neither_a_matrix_nor_the_legend_s_end() -> None:
    # Modelled on a README that describes its matrix under it, before the NIC legend.
    text = RETYPED_WITH_RULE.replace(
        "\nNIC Legend:",
        "GPU0 <-> GPU1 via NVLink (18 links); GPU0 and GPU1 share NIC1.\nNIC Legend:",
    )
    topo = parse(text)
    assert [d.nic_name for d in topo.nics] == ["mlx5_0", "mlx5_bond_0"]
    assert not any("another matrix" in w for w in topo.warnings)
