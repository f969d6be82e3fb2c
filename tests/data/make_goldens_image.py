"""Goldens for runtime/media.c's image input (test_media): small PNGs of every kind and what PIL,
transformers and diffusers make of them, written to tests/data/images/.

    PYTHONPATH=/opt/tpy python3 tests/data/make_goldens_image.py

Needs Pillow, numpy and transformers; diffusers (and torch) when importable, for a check that
VideoProcessor.preprocess is the LANCZOS resize scaled to [-1, 1]. Every output is raw RGB8
(rows top first) named INPUT.STEP_WxH.rgb; decoded inputs are INPUT.rgb. meta.txt records the
versions and every case as "file width height".
"""
import io
import os
import random
import struct
import sys
import zlib

import numpy as np
import PIL
import PIL.Image as Image
import PIL.ImageOps as ImageOps
import PIL.PngImagePlugin as PngImagePlugin
import transformers
from transformers.image_transforms import center_crop, get_resize_output_image_size
from transformers.image_utils import ChannelDimension

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "images")
meta = []


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def raw_png(width, height, depth, color_type, rows, extra=b"", interlace=0):
    """A PNG PIL cannot write (16-bit RGB, 2-bit gray, Adam7); rows are packed scanlines."""
    if interlace:
        raw = b""
        bpp = {0: 1, 2: 3, 4: 2, 6: 4}[color_type] * depth // 8
        for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)):
            xs = range(x0, width, dx)
            if not xs:
                continue
            for y in range(y0, height, dy):
                raw += b"\0" + b"".join(rows[y][x * bpp:(x + 1) * bpp] for x in xs)
    else:
        raw = b"".join(b"\0" + r for r in rows)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, interlace)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def save_png(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def pil_png(im, **kw):
    b = io.BytesIO()
    im.save(b, "PNG", optimize=True, **kw)
    return b.getvalue()


def write_rgb(name, im):
    assert im.mode == "RGB", im.mode
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(im.tobytes())
    meta.append(f"{name} {im.width} {im.height}")


def load_image(name):
    """diffusers.utils.load_image of a file: the EXIF orientation applied, then RGB."""
    with Image.open(os.path.join(OUT, name)) as im:
        return ImageOps.exif_transpose(im).convert("RGB")


def photo(width, height, seed):
    """Gradients, a few hard edges and noise: every filter tap matters, clipping happens."""
    rnd = random.Random(seed)
    px = []
    for y in range(height):
        for x in range(width):
            r = 255 * x // (width - 1)
            g = 255 * y // (height - 1)
            b = 255 if (x // 5 + y // 4) % 2 else 0
            n = rnd.randint(-40, 40)
            px.append(tuple(max(0, min(255, v + n)) for v in (r, g, b)))
    im = Image.new("RGB", (width, height))
    im.putdata(px)
    return im


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    rnd = random.Random(7)

    # Inputs of every kind.
    save_png("photo.png", pil_png(photo(37, 23, 1)))
    save_png("gray.png", pil_png(photo(19, 13, 2).convert("L")))
    rgba = photo(21, 17, 3).convert("RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize((21, 17)))
    save_png("rgba.png", pil_png(rgba))
    la = photo(11, 9, 4).convert("LA")
    save_png("la.png", pil_png(la))
    save_png("palette.png", pil_png(photo(17, 11, 5).quantize(16), transparency=3))
    g16 = Image.new("I;16", (9, 7))
    g16.putdata([rnd.randint(0, 600) for _ in range(63)])
    save_png("gray16.png", pil_png(g16))
    rows16 = [b"".join(struct.pack(">3H", *(rnd.randint(0, 65535) for _ in range(3))) for _ in range(6)) for _ in range(5)]
    save_png("rgb16.png", raw_png(6, 5, 16, 2, rows16))
    rows2 = [bytes(rnd.randint(0, 255) for _ in range(3)) for _ in range(4)]
    save_png("gray2.png", raw_png(11, 4, 2, 0, rows2))
    rows_i = [bytes(rnd.randint(0, 255) for _ in range(13 * 3)) for _ in range(10)]
    save_png("interlaced.png", raw_png(13, 10, 8, 2, rows_i, interlace=1))
    small = photo(5, 3, 6)
    for o in range(2, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        save_png(f"orient{o}.png", pil_png(small, exif=exif.tobytes()))
    xmp = PngImagePlugin.PngInfo()
    xmp.add_itxt("XML:com.adobe.xmp", '<x:xmpmeta><rdf:Description tiff:Orientation="6"/></x:xmpmeta>')
    save_png("orient_xmp.png", pil_png(small, pnginfo=xmp))
    raw_exif = PngImagePlugin.PngInfo()
    data = b"Exif\0\0" + exif.tobytes()  # orientation 8
    raw_exif.add_text("Raw profile type exif", f"\nexif\n{len(data):8}\n{data.hex()}\n", zip=True)
    save_png("orient_raw.png", pil_png(small, pnginfo=raw_exif))

    # Refusals: a side past 16384 (no pixel data needed to say so) and a damaged checksum.
    save_png("refuse_large.png", raw_png(16385, 2, 8, 2, []))
    bad = bytearray(pil_png(small))
    bad[29] ^= 0xFF  # IHDR's CRC
    save_png("refuse_crc.png", bytes(bad))

    # What load_image makes of each.
    names = sorted(f for f in os.listdir(OUT) if f.endswith(".png") and not f.startswith("refuse_"))
    for name in names:
        write_rgb(name[:-4] + ".rgb", load_image(name))

    # Image.resize, as VaeImageProcessor.resize calls it.
    src = load_image("photo.png")
    for w, h in ((32, 16), (48, 30), (20, 40), (37, 30), (50, 23), (37, 23), (5, 3), (111, 69),
                 (36, 7), (12, 7), (34, 17)):  # Pillow 13: vertical pass first, horizontal first, the tie
        write_rgb(f"photo.lanczos_{w}x{h}.rgb", src.resize((w, h), Image.Resampling.LANCZOS))
    for w, h in ((32, 16), (9, 61)):
        write_rgb(f"photo.bicubic_{w}x{h}.rgb", src.resize((w, h), Image.Resampling.BICUBIC))
    write_rgb("gray.lanczos_8x6.rgb", load_image("gray.png").resize((8, 6), Image.Resampling.LANCZOS))
    write_rgb("rgba.bicubic_40x9.rgb", load_image("rgba.png").resize((40, 9), Image.Resampling.BICUBIC))
    write_rgb("palette.lanczos_30x25.rgb", load_image("palette.png").resize((30, 25), Image.Resampling.LANCZOS))

    # CLIPImageProcessor: shortest edge to 24 with BICUBIC, then the centre 24 x 24.
    arr = np.array(src)
    h, w = get_resize_output_image_size(arr, 24, default_to_square=False, input_data_format=ChannelDimension.LAST)
    short = src.resize((w, h), Image.Resampling.BICUBIC)
    write_rgb(f"photo.bicubic_{w}x{h}.rgb", short)
    crop = center_crop(np.array(short), (24, 24), input_data_format=ChannelDimension.LAST)
    write_rgb("photo.clip_24x24.rgb", Image.fromarray(crop))
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    proc = CLIPImageProcessorPil(size={"shortest_edge": 24}, crop_size={"height": 24, "width": 24}, do_rescale=False,
                                 do_normalize=False)
    pv = np.asarray(proc(images=src, return_tensors="np")["pixel_values"][0])
    assert (pv.transpose(1, 2, 0) == crop).all(), "CLIPImageProcessorPil differs from resize + center_crop"
    # transformers' center_crop where the crop pads (odd and even differences).
    for cw, ch in ((40, 26), (30, 30), (36, 20)):
        c = center_crop(arr, (ch, cw), input_data_format=ChannelDimension.LAST)
        write_rgb(f"photo.crop_{cw}x{ch}.rgb", Image.fromarray(c))
    for (sw, sh), edge in (((37, 23), 24), ((23, 37), 24), ((30, 30), 24), ((832, 480), 224), ((480, 832), 224),
                           ((1280, 720), 224), ((1000, 999), 224), ((7, 3), 224), ((3, 7), 5)):
        oh, ow = get_resize_output_image_size(np.zeros((sh, sw, 3), np.uint8), edge, default_to_square=False,
                                              input_data_format=ChannelDimension.LAST)
        meta.append(f"shortest_edge {sw} {sh} {edge} {ow} {oh}")

    try:
        import torch
        from diffusers.video_processor import VideoProcessor
    except ImportError as e:
        print("diffusers check skipped:", e, file=sys.stderr)
    else:
        x = VideoProcessor(vae_scale_factor=8).preprocess(src, height=32, width=48)
        want = torch.from_numpy(np.array(src.resize((48, 32), Image.Resampling.LANCZOS))).permute(2, 0, 1)[None]
        assert torch.equal(x, want.float() / 255 * 2 - 1), "VideoProcessor.preprocess differs from LANCZOS / 127.5 - 1"
        print("VideoProcessor.preprocess == LANCZOS resize * 2 / 255 - 1", file=sys.stderr)

    with open(os.path.join(OUT, "meta.txt"), "w") as f:
        f.write(f"# Pillow {PIL.__version__}, transformers {transformers.__version__}, numpy {np.__version__}\n")
        f.write("\n".join(meta) + "\n")


if __name__ == "__main__":
    main()
