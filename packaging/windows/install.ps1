<#
.SYNOPSIS
    Install Nalar on Windows: inside WSL2 (Ubuntu) with its GPU engine, plus Start-menu and desktop shortcuts.

.DESCRIPTION
    vLLM has no native Windows build, so Nalar runs inside WSL2 and WSLg shows its window on the Windows
    desktop. This script:
      1. checks that WSL is installed and the distro runs as WSL 2, that the distro is Ubuntu, that WSLg is
         there, and that the NVIDIA driver is visible inside it (nvidia-smi);
      2. installs the Ubuntu packages Nalar needs (as root inside the distro, so no sudo prompt);
      3. copies this checkout (or clones -RepoUrl) to ~/nalar in the distro: on the Linux file system,
         which is many times faster than running from /mnt/c;
      4. runs `make setup` there with the GPU engine (vllm), and `nalar doctor` to check the result;
      5. creates "Nalar" shortcuts in the Start menu and on the desktop that run
         wsl.exe -d <Distro> -- bash -lc 'cd ~/nalar && .venv/bin/python -m app'
    Every check that fails says what to do. Run it again after fixing; it is safe to rerun.

.EXAMPLE
    powershell -ExecutionPolicy Bypass -File packaging\windows\install.ps1
.EXAMPLE
    powershell -ExecutionPolicy Bypass -File packaging\windows\install.ps1 -Distro Ubuntu-24.04
#>
[CmdletBinding()]
param(
    # The WSL distro to install into (see `wsl -l -v`).
    [string]$Distro = "Ubuntu",
    # A Nalar checkout on Windows to copy into WSL; by default the one this script belongs to.
    [string]$Source = "",
    # Clone this git URL inside WSL instead of copying -Source.
    [string]$RepoUrl = "",
    # Skip the Start-menu and desktop shortcuts.
    [switch]$NoShortcuts
)

Set-StrictMode -Version Latest
$ErrorActionPreference = "Stop"
# wsl.exe writes UTF-16 unless told otherwise; with WSL_UTF8 its output parses as text.
$env:WSL_UTF8 = "1"

$InstallDir = "nalar"  # under the distro user's home: ~/nalar
$LaunchCommand = "cd ~/$InstallDir && .venv/bin/python -m app"
$AptPackages = "git make rsync python3-venv python3-dev build-essential libgl1 libegl1 libxkbcommon-x11-0 " +
    "libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-render-util0 libxcb-xinerama0 " +
    "libxcb-xkb1 libxcb-randr0 libxcb-shape0 fonts-dejavu-core"

function Fail([string]$Problem, [string]$Fix) {
    Write-Host ""
    Write-Host "Nalar could not be installed: $Problem" -ForegroundColor Red
    Write-Host "Fix: $Fix" -ForegroundColor Yellow
    exit 1
}

function Step([string]$Text) {
    Write-Host "==> $Text" -ForegroundColor Cyan
}

# Runs a bash command inside the distro and returns its exit code. -e runs bash directly, not through the
# default shell, so the command reaches bash as one argument. Its output goes to the console, not into
# the function's return value.
function Invoke-Wsl([string]$Command, [switch]$AsRoot) {
    $userArgs = @()
    if ($AsRoot) { $userArgs = @("-u", "root") }
    & wsl.exe -d $Distro @userArgs -e bash -lc $Command | Out-Host
    return $LASTEXITCODE
}

# ---- 1. WSL 2, the distro, WSLg and the GPU ----------------------------------------------------------

Step "Checking WSL"
if (-not (Get-Command wsl.exe -ErrorAction SilentlyContinue)) {
    Fail "WSL is not installed." "In PowerShell as administrator run: wsl --install -d Ubuntu   then reboot and run this script again."
}
& wsl.exe --status *> $null
if ($LASTEXITCODE -ne 0) {
    Fail "wsl --status failed: WSL is not set up (or too old to know --status)." `
         "Run: wsl --install   (as administrator), or wsl --update, then reboot."
}

$listing = (& wsl.exe -l -v) -join "`n"
$row = $listing -split "`n" | ForEach-Object { $_.Trim().TrimStart("*").Trim() } |
    Where-Object { $_ -match "^$([regex]::Escape($Distro))\s+\S+\s+(\d)$" } | Select-Object -First 1
if (-not $row) {
    Fail "WSL has no distro named '$Distro' (wsl -l -v lists: $($listing -replace '\s+', ' '))." `
         "Install it with: wsl --install -d Ubuntu   or pass the right name: -Distro <name>."
}
$version = [int]([regex]::Match($row, "(\d)$").Groups[1].Value)
if ($version -ne 2) {
    Fail "'$Distro' runs as WSL $version; the GPU and WSLg need WSL 2." "Run: wsl --set-version $Distro 2"
}

$osId = (& wsl.exe -d $Distro -e sh -c '. /etc/os-release && echo $ID') -join ""
if ($osId.Trim() -ne "ubuntu") {
    Fail "'$Distro' is '$($osId.Trim())', not Ubuntu; Nalar's set-up is tested on Ubuntu." `
         "Install Ubuntu with: wsl --install -d Ubuntu   and pass -Distro Ubuntu."
}

& wsl.exe -d $Distro -e test -d /mnt/wslg
if ($LASTEXITCODE -ne 0) {
    Fail "WSLg (which shows Linux windows on the Windows desktop) is not available in '$Distro'." `
         "Use Windows 11 or Windows 10 22H2 with WSL from the Microsoft Store: run wsl --update, then wsl --shutdown."
}

Step "Checking the NVIDIA GPU inside WSL (nvidia-smi)"
if ((Invoke-Wsl "nvidia-smi -L || /usr/lib/wsl/lib/nvidia-smi -L") -ne 0) {
    Fail "nvidia-smi inside '$Distro' does not see a GPU." `
         ("Install the current NVIDIA driver for Windows (it includes WSL support), run wsl --shutdown, and check " +
          "that nvidia-smi lists your card inside Ubuntu. Do not install an NVIDIA Linux driver inside WSL.")
}

# ---- 2. Ubuntu packages ------------------------------------------------------------------------------

Step "Installing Ubuntu packages (git, make, python3-venv, Qt's libraries)"
if ((Invoke-Wsl "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $AptPackages" -AsRoot) -ne 0) {
    Fail "apt-get could not install: $AptPackages" "Check the network inside WSL (ping archive.ubuntu.com) and rerun."
}

# ---- 3. Nalar's files in ~/nalar ------------------------------------------------------------------------

if ($RepoUrl) {
    Step "Cloning $RepoUrl into ~/$InstallDir"
    $code = Invoke-Wsl "if [ -d ~/$InstallDir/.git ]; then git -C ~/$InstallDir pull --ff-only; else git clone '$RepoUrl' ~/$InstallDir; fi"
    if ($code -ne 0) { Fail "git could not fetch $RepoUrl." "Check the URL and the network, then rerun." }
} else {
    if (-not $Source) { $Source = (Resolve-Path (Join-Path $PSScriptRoot "..\..")).Path }
    if (-not (Test-Path (Join-Path $Source "Makefile")) -or -not (Test-Path (Join-Path $Source "app\__main__.py"))) {
        Fail "$Source is not a Nalar checkout (no Makefile and app\__main__.py)." "Pass -Source <checkout> or -RepoUrl <git url>."
    }
    $wslSource = ((& wsl.exe -d $Distro -e wslpath -a ($Source -replace "\\", "/")) -join "").Trim()
    Step "Copying $Source into ~/$InstallDir"
    $code = Invoke-Wsl "mkdir -p ~/$InstallDir && rsync -a --delete --exclude .venv --exclude __pycache__ --exclude .pytest_cache '$wslSource/' ~/$InstallDir/"
    if ($code -ne 0) { Fail "copying $Source into WSL failed." "Check that $Source is readable, then rerun." }
}

# ---- 4. The venv with the GPU engine ------------------------------------------------------------------

Step "Installing Nalar with the GPU engine (make setup: vLLM, PyTorch, the embedded model; several minutes)"
if ((Invoke-Wsl "cd ~/$InstallDir && NALAR_ENGINE=gpu make setup") -ne 0) {
    Fail "make setup failed inside WSL." "Read the error above; rerun this script after fixing it (it resumes)."
}
Step "Checking the result (nalar doctor)"
if ((Invoke-Wsl "cd ~/$InstallDir && .venv/bin/python -m app doctor") -ne 0) {
    Write-Host "nalar doctor reported a problem (above). Nalar is installed; fix that before the first start." `
        -ForegroundColor Yellow
}

# ---- 5. Shortcuts ----------------------------------------------------------------------------------------

if (-not $NoShortcuts) {
    Step "Creating Start-menu and desktop shortcuts"
    $iconDir = Join-Path $env:LOCALAPPDATA "Nalar"
    New-Item -ItemType Directory -Force -Path $iconDir | Out-Null
    $icon = Join-Path $iconDir "nalar.ico"
    $iconSource = Join-Path $PSScriptRoot "..\..\resources\nalar.ico"
    if (Test-Path $iconSource) { Copy-Item -Force $iconSource $icon }
    $shell = New-Object -ComObject WScript.Shell
    $places = @([Environment]::GetFolderPath("Programs"), [Environment]::GetFolderPath("Desktop"))
    foreach ($folder in $places) {
        $link = $shell.CreateShortcut((Join-Path $folder "Nalar.lnk"))
        $link.TargetPath = Join-Path $env:WINDIR "System32\wsl.exe"
        $link.Arguments = "-d $Distro -- bash -lc '$LaunchCommand'"
        $link.WorkingDirectory = $env:USERPROFILE
        $link.Description = "Nalar: reasoning models on your GPU (runs in WSL2, shown through WSLg)"
        $link.WindowStyle = 7  # minimized: the wsl.exe console stays out of the way; Nalar's window is WSLg's
        if (Test-Path $icon) { $link.IconLocation = "$icon,0" }
        $link.Save()
        Write-Host "    $(Join-Path $folder 'Nalar.lnk')"
    }
}

Write-Host ""
Write-Host "Nalar is installed in WSL ($Distro, ~/$InstallDir). Start it from the Start menu or the desktop," -ForegroundColor Green
Write-Host "or from Ubuntu with: $LaunchCommand" -ForegroundColor Green
